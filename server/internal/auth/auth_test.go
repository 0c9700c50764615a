package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func digest(tok string) string {
	s := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(s[:])
}

func TestParse(t *testing.T) {
	good := "tokens:\n" +
		"  - name: a\n    sha256: " + digest("ta") + "\n    domains: [x, y]\n" +
		"  - name: all\n    sha256: " + digest("tall") + "\n    domains: [\"*\"]\n"
	tk, err := Parse("t.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if tk.Len() != 2 {
		t.Fatalf("Len = %d, want 2", tk.Len())
	}
	a := NewAuthenticator("single", true)
	a.SetTokens(tk)
	for _, c := range []struct {
		header, name, domain string
		ok, allowed          bool
	}{
		{"Bearer ta", "a", "x", true, true},
		{"bearer  ta ", "a", "y", true, true},
		{"Bearer ta", "a", "z", true, false},
		{"Bearer tall", "all", "z", true, true},
		{"Bearer single", "token", "z", true, true},
		{"Bearer tb", "", "x", false, false},
		{"Basic ta", "", "x", false, false},
		{"ta", "", "x", false, false},
		{"", "", "x", false, false},
	} {
		s, ok := a.Check(c.header)
		if ok != c.ok {
			t.Errorf("Check(%q) ok = %v, want %v", c.header, ok, c.ok)
			continue
		}
		if !ok {
			continue
		}
		if s.Name != c.name || s.Allows(c.domain) != c.allowed {
			t.Errorf("Check(%q): scope %q allows %q = %v; want %q, %v", c.header, s.Name, c.domain, s.Allows(c.domain), c.name, c.allowed)
		}
		err := Authorize(With(context.Background(), s), c.domain)
		var de *DeniedError
		if c.allowed != (err == nil) || !c.allowed && (!errors.As(err, &de) || de.Token != c.name || de.Domain != c.domain) {
			t.Errorf("Authorize(%q, %q) = %v", c.name, c.domain, err)
		}
	}
	if err := Authorize(context.Background(), "any"); err != nil {
		t.Errorf("without a scope (no authentication): %v", err)
	}
	// Only the single token before the file is loaded; none when neither.
	if _, ok := NewAuthenticator("", true).Check("Bearer ta"); ok {
		t.Error("a tokens file's token accepted before the file was loaded")
	}
	if NewAuthenticator("", false).Enabled() {
		t.Error("enabled without tokens")
	}
	if (*Scope)(nil).Unlimited() != true || !All.Unlimited() || tk.byDigest[sha256.Sum256([]byte("ta"))].Unlimited() {
		t.Error("Unlimited: want true for nil and All, false for a scoped token")
	}
}

func TestParseErrors(t *testing.T) {
	d := digest("t")
	for _, c := range []struct{ yaml, want string }{
		{"tokens:\n  - name: a\n    sha256: " + d + "\n    domains: [x]\n    extra: 1\n", "field extra not found"},
		{"tokens:\n  - sha256: " + d + "\n    domains: [x]\n", "t.yaml:2: tokens[0]: name is missing"},
		{"tokens:\n  - name: a\n    sha256: abc\n    domains: [x]\n", "sha256 must be 64 hex digits"},
		{"tokens:\n  - name: a\n    sha256: " + strings.Repeat("zz", 32) + "\n    domains: [x]\n", "sha256 must be 64 hex digits"},
		{"tokens:\n  - name: a\n    sha256: " + d + "\n", "domains is empty"},
		{"tokens:\n  - name: a\n    sha256: " + d + "\n    domains: [\"*\", x]\n", `"*" allows every domain: list it alone`},
		{"tokens:\n  - name: a\n    sha256: " + d + "\n    domains: [\"\"]\n", "a domain is empty"},
		{"tokens:\n  - name: a\n    sha256: " + d + "\n    domains: [x]\n  - name: a\n    sha256: " + digest("u") + "\n    domains: [x]\n", `t.yaml:5: tokens[1]: name "a" is used twice`},
		{"tokens:\n  - name: a\n    sha256: " + d + "\n    domains: [x]\n  - name: b\n    sha256: " + d + "\n    domains: [x]\n", `the same token as "a"`},
		{"tokens: 3\n", "t.yaml"},
	} {
		_, err := Parse("t.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", c.yaml, err, c.want)
		}
	}
	if tk, err := Parse("t.yaml", nil); err != nil || tk.Len() != 0 {
		t.Errorf("an empty file: %v, %v; want no tokens", tk, err)
	}
}

// FuzzParse: Parse never panics, and what it accepts holds only valid
// entries: each token's scope is found by its digest and named.
func FuzzParse(f *testing.F) {
	f.Add([]byte("tokens:\n  - name: a\n    sha256: " + digest("t") + "\n    domains: [x]\n"))
	f.Add([]byte("tokens: []\n"))
	f.Add([]byte("tokens:\n  - {name: b, sha256: " + digest("u") + ", domains: ['*']}\n"))
	f.Add([]byte("tokens: [{name: ''}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tk, err := Parse("f.yaml", data)
		if err != nil {
			return
		}
		for d, s := range tk.byDigest {
			if s == nil || s.Name == "" || (!s.all && len(s.domains) == 0) {
				t.Fatalf("accepted an invalid entry %x: %+v", d, s)
			}
		}
	})
}
