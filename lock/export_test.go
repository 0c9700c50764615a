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

// MemoryWaiters returns how many Lock calls wait in the queue of the Memory
// Mutex name, as the conformance suite's Waiters hook.
func MemoryWaiters(m *backend.Memory, name string) int {
	sh := unwrap.Memory(m).Table("lock").Shard(name)
	sh.Lock()
	defer sh.Unlock()
	if e := sh.Get(name); e != nil {
		return len(e.Value.(*memLock).waiters)
	}
	return 0
}

// RWMemoryWaiters returns how many Lock and RLock calls wait in the queues
// of the Memory RWMutex name.
func RWMemoryWaiters(m *backend.Memory, name string) int {
	sh := unwrap.Memory(m).Table("rwlock").Shard(name)
	sh.Lock()
	defer sh.Unlock()
	if e := sh.Get(name); e != nil {
		st := e.Value.(*memRW)
		return len(st.rq) + len(st.wq)
	}
	return 0
}

// SemMemoryWaiters returns how many Lock calls wait in the queue of the
// Memory Semaphore name.
func SemMemoryWaiters(m *backend.Memory, name string) int {
	sh := unwrap.Memory(m).Table("semaphore").Shard(name)
	sh.Lock()
	defer sh.Unlock()
	if e := sh.Get(name); e != nil {
		return len(e.Value.(*memSem).queue)
	}
	return 0
}

// WaitCancels waits until the background cancels and queue departures of
// failed acquires have ended.
func WaitCancels() { cancels.Wait() }
