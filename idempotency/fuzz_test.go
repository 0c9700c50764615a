package idempotency

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// FuzzDecodeResponse: a stored response is outside input (anything may sit
// in Redis under a key); decoding never panics, and whatever decodes
// re-encodes to a response that decodes the same.
func FuzzDecodeResponse(f *testing.F) {
	f.Add(encodeResponse(response{status: 201, header: http.Header{"Location": {"/a"}, "X": {"1", "2"}}, body: []byte("body")}))
	f.Add(encodeResponse(response{status: 204, header: http.Header{}}))
	f.Add([]byte{1, 0, 200, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeResponse(b)
		if err != nil {
			return
		}
		r2, err := decodeResponse(encodeResponse(r))
		if err != nil {
			t.Fatalf("re-encoded response does not decode: %v", err)
		}
		if r2.status != r.status || !bytes.Equal(r2.body, r.body) {
			t.Fatalf("round trip changed %d %q to %d %q", r.status, r.body, r2.status, r2.body)
		}
		for k, vs := range r.header {
			if hopByHop[http.CanonicalHeaderKey(k)] {
				continue
			}
			if fmt.Sprint(r2.header[k]) != fmt.Sprint(vs) {
				t.Fatalf("header %q: %q became %q", k, vs, r2.header[k])
			}
		}
	})
}

// FuzzParseKey: the header parser never panics, accepts only keys of 1 to
// MaxHeaderKeyLen printable ASCII bytes, and reads back a key it quoted.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`"abc"`, `abc`, `"a\"b\\c"`, `"unterminated`, `""`, `"a" "b"`, `"\x"`, "\x00", strings.Repeat("k", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, field string) {
		key, err := ParseKey(field)
		if err != nil {
			return
		}
		if key == "" || len(key) > MaxHeaderKeyLen {
			t.Fatalf("accepted key of %d bytes", len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("accepted non-printable byte %#x", key[i])
			}
		}
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
		if back, err := ParseKey(quoted); err != nil || back != key {
			t.Fatalf("ParseKey(%q) = %q, %v; want %q", quoted, back, err, key)
		}
	})
}

func TestRecorder(t *testing.T) {
	r := newRecorder()
	r.Header().Set("A", "1")
	r.WriteHeader(http.StatusEarlyHints) // informational: not final
	r.WriteHeader(http.StatusAccepted)
	r.Header().Set("B", "late") // after WriteHeader: not sent, as net/http
	r.WriteHeader(http.StatusTeapot)
	r.Write([]byte("x"))
	r.Flush()
	got := r.response()
	if got.status != http.StatusAccepted || got.header.Get("A") != "1" || got.header.Get("B") != "" || string(got.body) != "x" {
		t.Fatalf("recorded %d %v %q", got.status, got.header, got.body)
	}
	if empty := newRecorder().response(); empty.status != http.StatusOK || len(empty.body) != 0 {
		t.Fatalf("handler that wrote nothing: %d %q", empty.status, empty.body)
	}
}
