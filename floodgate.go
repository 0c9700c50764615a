// Package floodgate is distributed traffic control and coordination for Go,
// on Redis or in process. The work is done by its packages: ratelimit (every
// classic rate limiting algorithm, several rules decided atomically), lock,
// counter, delayqueue, bloom, idempotency, lockout and httplimit, over a
// backend (backend.NewMemory, backend.NewRedis). Start with ratelimit.New.
//
// This package holds only the release version, so importing it pulls in
// nothing.
package floodgate

// Version is floodgate's release version (semantic versioning, without the
// leading "v"): the release this source tree is, or, between releases, the
// last one it follows. `floodgate version` prints it; CHANGELOG.md has a
// heading for it.
const Version = "0.9.0"
