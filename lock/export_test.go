package lock

import (
	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
)

// DropMemory deletes the state of a Memory lock, as the conformance suite's
// Drop hook.
func DropMemory(m *backend.Memory, name string) {
	(&memDriver{t: unwrap.Memory(m).Table("lock"), name: name}).drop()
}

// WaitCancels waits until the background cancels and queue departures of
// failed acquires have ended.
func WaitCancels() { cancels.Wait() }
