package longkey_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/longkey"
)

// A digest must fit where any key fits.
var _ = [1]int{}[longkey.DigestLen/(backend.MaxKeyLen+1)]

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// TestBoundary checks the keys around backend.MaxKeyLen: up to it a key is
// itself (the state of every key a store could hold before is kept), past it
// the key's digest, of the documented form.
func TestBoundary(t *testing.T) {
	maxLen := backend.MaxKeyLen
	for _, n := range []int{0, 1, longkey.PrefixLen, longkey.DigestLen, maxLen - 1, maxLen, maxLen + 1, maxLen + 2, 2 * maxLen, 1 << 20} {
		for _, fill := range []string{"k", "{", "é"} {
			key := strings.Repeat(fill, n)[:n]
			got := longkey.Key(key)
			if n <= maxLen {
				if got != key {
					t.Errorf("%d bytes of %q: changed to %q", n, fill, got)
				}
				continue
			}
			want := key[:longkey.PrefixLen] + "#sha256:" + sum(key)
			if got != want {
				t.Errorf("%d bytes of %q: got %q, want %q", n, fill, got, want)
			}
			if len(got) != longkey.DigestLen || len(got) > maxLen {
				t.Errorf("%d bytes: digest of %d bytes", n, len(got))
			}
			if again := longkey.Key(key); again != got {
				t.Errorf("%d bytes: Key is not stable: %q, then %q", n, got, again)
			}
		}
	}
	// The format names state in deployed stores, and the package docs of
	// ratelimit, httplimit, counter, lockout and idempotency describe it: it
	// must not change. (The SHA-256 of 1,025 a's, as Python's hashlib
	// computes it.)
	const want = "#sha256:4a82297889eb505cf6b5cbdf69977afab4632d6557539782f657bd7dc78091a5"
	if got := longkey.Key(strings.Repeat("a", maxLen+1)); got != strings.Repeat("a", 256)+want || len(got) != 328 {
		t.Errorf("digest of 1025 a's: %q", got[longkey.PrefixLen:])
	}
}

// TestDistinct: keys one byte apart anywhere past the boundary, at the
// boundary or at the end, have different digests; a key of MaxKeyLen and
// that key plus a byte too.
func TestDistinct(t *testing.T) {
	maxLen := backend.MaxKeyLen
	base := strings.Repeat("x", 3000)
	seen := map[string]string{}
	add := func(k string) {
		d := longkey.Key(k)
		if prev, dup := seen[d]; dup {
			t.Fatalf("keys of %d and %d bytes share state %q", len(prev), len(k), d)
		}
		seen[d] = k
	}
	add(base[:maxLen])
	add(base[:maxLen+1])
	add(base[:maxLen+2])
	add(base)
	for _, i := range []int{0, longkey.PrefixLen - 1, longkey.PrefixLen, maxLen - 1, maxLen, maxLen + 1, len(base) - 1} {
		add(base[:i] + "y" + base[i+1:])
	}
}

// FuzzKey: for any two keys, Key is the key itself up to MaxKeyLen and a
// digest of DigestLen bytes past it, always fits the store, and sends two
// different keys to different states.
func FuzzKey(f *testing.F) {
	long := strings.Repeat("a", backend.MaxKeyLen)
	f.Add("", "a")
	f.Add(long, long+"b")
	f.Add(long+"b", long+"c")
	f.Add(long[:backend.MaxKeyLen-1], long+"{")
	f.Fuzz(func(t *testing.T, a, pad string) {
		// Fuzzers rarely make strings past MaxKeyLen: pad them there too.
		for _, k := range []string{a, a + long + pad, long + a + pad} {
			got := longkey.Key(k)
			switch {
			case len(k) <= backend.MaxKeyLen && got != k:
				t.Fatalf("key of %d bytes changed", len(k))
			case len(k) > backend.MaxKeyLen && (len(got) != longkey.DigestLen || !strings.HasPrefix(k, got[:longkey.PrefixLen])):
				t.Fatalf("key of %d bytes: digest %q", len(k), got)
			}
			if len(got) > backend.MaxKeyLen {
				t.Fatalf("key of %d bytes: state key of %d bytes", len(k), len(got))
			}
		}
		x, y := a+long, a+long+pad
		if pad != "" && longkey.Key(x) == longkey.Key(y) {
			t.Fatalf("%q and %q share a state", x, y)
		}
	})
}
