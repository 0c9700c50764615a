// Package callid makes the identifiers that floodgate's primitives give each
// logical call they send to a store, so that a script can tell a client's
// resend of a call from a new call.
package callid

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"
)

// callPrefix makes call IDs unique across processes: 8 random bytes drawn
// once per process.
var callPrefix = func() string {
	var b [8]byte
	rand.Read(b[:]) // never fails on supported platforms (crypto/rand)
	return hex.EncodeToString(b[:])
}()

var callSeq atomic.Uint64

// New returns an identifier for one logical call of a primitive: the
// script runs that a client's retries make of that call carry the same ID,
// so the script can tell a replay from a new call and answer it as the first
// run did. IDs are unique across processes (a per-process random prefix and
// a counter), short (at most 30 bytes) and cheap: no allocation beyond the
// string, no system call.
//
// Retries of a call reuse its ID; a new call (a new attempt the caller
// decides on, such as the next wait of a Lock) takes a new one.
func New() string {
	return callPrefix + "-" + strconv.FormatUint(callSeq.Add(1), 36)
}
