// Package unwrap gives floodgate's own packages the state behind a
// *backend.Memory or a *backend.Redis: its memstore.Store or its
// redisstore.Store, whose methods (tables, shards, scripts, keys, pub/sub)
// the primitives run on.
//
// Package backend exports only what applications call: constructors,
// options, errors, Stats and Close. It cannot export the means to reach its
// internals without every user seeing them, and it cannot be imported by
// this package, which it imports; so backend hands the two accessors over in
// its init (the pattern of grpc-go's internal package, whose function
// variables grpc sets). Any package that holds a *backend.Memory or
// *backend.Redis has imported backend, so backend's init has run by then.
package unwrap

import (
	"github.com/floodgate-dev/floodgate/internal/memstore"
	"github.com/floodgate-dev/floodgate/internal/redisstore"
)

var (
	memoryOf func(b any) *memstore.Store
	redisOf  func(b any) *redisstore.Store
)

// Set installs the accessors. Package backend calls it once, in its init;
// nothing else may.
func Set(memory func(b any) *memstore.Store, redis func(b any) *redisstore.Store) {
	memoryOf, redisOf = memory, redis
}

// Memory returns the state of b when b is a *backend.Memory, else nil.
func Memory(b any) *memstore.Store { return memoryOf(b) }

// Redis returns the state of b when b is a *backend.Redis, else nil.
func Redis(b any) *redisstore.Store { return redisOf(b) }
