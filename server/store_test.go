package server

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/server/storeurl"
)

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://u:secret@h:1/2": "redis://u:xxxxx@h:1/2",
		"redis://:secret@h:1":    "redis://:xxxxx@h:1",
		"redis://h:1":            "redis://h:1",
		"redis://u@h:1":          "redis://u@h:1",
		"redis+sentinel://:pw@s1:26379/m?sentinel_password=sp": "redis+sentinel://:xxxxx@s1:26379/m?sentinel_password=xxxxx",
		"redis://s1:26379?master_set=m&sentinel_password=sp":   "redis://s1:26379?master_set=m&sentinel_password=xxxxx",
		"redis://h:1?dial_timeout=1s&password=p%40ss":          "redis://h:1?dial_timeout=1s&password=xxxxx",
	} {
		if got := storeurl.Redact(in); got != want {
			t.Errorf("storeurl.Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestOpenStoreSecrets: passwords given apart from the URL authenticate, a
// password given twice is refused, and no error carries a password.
func TestOpenStoreSecrets(t *testing.T) {
	r := testenv.NewRedis(t)
	const pass = "s3cret-Pa55"
	if _, err := r.Do(t.Context(), "CONFIG", "SET", "requirepass", pass); err != nil {
		t.Fatal(err)
	}
	url := "redis://" + r.Addr
	if _, _, err := storeurl.Open(url, backendtest.UniquePrefix(), time.Second); err == nil {
		t.Fatal("no password, yet OpenStore succeeded")
	}
	b, c, err := storeurl.Open(url, backendtest.UniquePrefix(), time.Second, storeurl.RedisPassword(pass))
	if err != nil {
		t.Fatalf("password given apart: %v", err)
	}
	s := newService(t, b, Options{})
	if got := decide(t, s, desc(1, "user", "u1")); got.Failed || got.Code != CodeOK {
		t.Fatalf("decision with the password given apart: %+v", got)
	}
	c.Close()

	for _, tc := range []struct {
		url  string
		opts []storeurl.Option
		want string
	}{
		{url: "redis://:" + pass + "x@" + r.Addr, want: "WRONGPASS"},
		{url: url, opts: []storeurl.Option{storeurl.RedisPassword(pass + "x")}, want: "WRONGPASS"},
		{url: "redis://:" + pass + "@" + r.Addr, opts: []storeurl.Option{storeurl.RedisPassword(pass)}, want: "given twice"},
		{url: url, opts: []storeurl.Option{storeurl.SentinelPassword(pass)}, want: "no Sentinel master"},
		{url: "redis+sentinel://:" + pass + "@127.0.0.1:1/m?sentinel_password=" + pass + "&dial_timeout=200ms", want: "--redis redis+sentinel://:xxxxx@127.0.0.1:1/m?sentinel_password=xxxxx"},
		{url: "redis+sentinel://127.0.0.1:1/m", opts: []storeurl.Option{storeurl.SentinelPassword(pass), storeurl.RedisPassword(pass)}, want: "redis+sentinel://127.0.0.1:1/m"},
		{url: "redis://:" + pass + "@h:1?protocol=bogus", want: "--redis redis://:xxxxx@h:1"},
	} {
		_, _, err := storeurl.Open(tc.url, backendtest.UniquePrefix(), 300*time.Millisecond, tc.opts...)
		if err == nil {
			t.Errorf("%s: no error", storeurl.Redact(tc.url))
			continue
		}
		if strings.Contains(err.Error(), pass) {
			t.Errorf("%s: the error shows the password: %v", storeurl.Redact(tc.url), err)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want it to contain %q", storeurl.Redact(tc.url), err, tc.want)
		}
	}
}
