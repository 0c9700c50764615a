// Package longkey maps user keys of any length to keys a store can hold:
// a key of at most backend.MaxKeyLen bytes is itself, and a longer one is
// replaced by its digest, its first PrefixLen bytes followed by "#sha256:"
// and the hex SHA-256 of the whole key (DigestLen bytes in all).
//
// So the same long key is always counted under the same state, two long keys
// that differ anywhere (also beyond their first MaxKeyLen bytes) under
// different states, and the state of a key of at most MaxKeyLen bytes is the
// one it always had. The prefix keeps a digest readable in the store (a
// "tenant:acme:" at its start stays there).
//
// A digest is a string of DigestLen bytes, so a caller can make one collide
// with a long key's only by sending that digest: a key that names the long
// key's state, which sending the long key itself does as well.
package longkey

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/floodgate-dev/floodgate/backend"
)

const (
	// PrefixLen is how many leading bytes of a long key its digest keeps.
	PrefixLen = 256
	// Sep stands between a digest's prefix and its hex SHA-256.
	Sep = "#sha256:"
	// DigestLen is the length of every digest.
	DigestLen = PrefixLen + len(Sep) + 2*sha256.Size
)

// Key returns the key that key's state is kept under: key itself when it has
// at most backend.MaxKeyLen bytes, else its digest (see the package doc).
// The empty key is returned as it is: callers refuse it.
func Key(key string) string {
	if len(key) <= backend.MaxKeyLen {
		return key
	}
	return digest(key)
}

func digest(key string) string {
	sum := sha256.Sum256([]byte(key))
	b := make([]byte, DigestLen)
	n := copy(b, key[:PrefixLen])
	n += copy(b[n:], Sep)
	hex.Encode(b[n:], sum[:])
	return string(b)
}
