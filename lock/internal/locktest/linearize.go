package locktest

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/floodgate-dev/floodgate/lock"
)

// Register is the resource of a linearizability test: a value that clients
// increment under a lock, passing the lease's fencing token. A fenced
// register admits a read or a write only with a token not lower than the
// highest it has seen; reads record their token too, so that a stale holder
// cannot write a value computed from a read that a newer holder has already
// superseded. An unfenced one admits everything: the negative control.
type Register interface {
	// Read returns the value; ok is false when token was refused.
	Read(ctx context.Context, token int64) (v int64, ok bool, err error)
	// Write sets the value; ok is false when token was refused.
	Write(ctx context.Context, token, v int64) (ok bool, err error)
}

// MemRegister is a Register in the test's memory. The zero value is a
// fenced register at 0; it is safe for concurrent use.
type MemRegister struct {
	Unfenced bool // admit every token (the negative control)

	mu       sync.Mutex
	v, fence int64
}

// Read implements Register.
func (r *MemRegister) Read(_ context.Context, token int64) (int64, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.Unfenced && token < r.fence {
		return 0, false, nil
	}
	r.fence = max(r.fence, token)
	return r.v, true, nil
}

// Write implements Register.
func (r *MemRegister) Write(_ context.Context, token, v int64) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.Unfenced && token < r.fence {
		return false, nil
	}
	r.fence = max(r.fence, token)
	r.v = v
	return true, nil
}

// IncOutput is the outcome of one locked increment.
type IncOutput struct {
	Read   int64 // the value read
	ReadOK bool  // the register admitted the read
	Wrote  bool  // the register admitted the write of Read+1
	// Lost reports that the lease was known lost when the increment ended:
	// Lost closed, or its deadline passed.
	Lost bool
	Err  error // the register failed
}

// IncModel is the porcupine model of the register under increments: an
// increment that both read and wrote must have read the register's current
// value, and adds one; a refused one changes nothing.
var IncModel = porcupine.Model{
	Init: func() any { return int64(0) },
	Step: func(state, _, output any) (bool, any) {
		s, out := state.(int64), output.(IncOutput)
		if out.ReadOK && out.Wrote {
			return out.Read == s, s + 1
		}
		return true, s
	},
	DescribeOperation: func(_, output any) string {
		o := output.(IncOutput)
		return fmt.Sprintf("inc read=%d ok=%v wrote=%v lost=%v", o.Read, o.ReadOK, o.Wrote, o.Lost)
	},
}

// History records locked increments for porcupine. The zero value is
// ready; it is safe for concurrent use.
type History struct {
	mu  sync.Mutex
	ops []porcupine.Operation
	won int64
}

// Increment makes one increment of reg by client under lease and records
// it: a read and a write of the value read + 1, both with the lease's token.
// between, if not nil, runs between the read and the write: a pause, a
// fault. The operation's interval starts when Increment is called, so call
// it once the lease is held.
func (h *History) Increment(ctx context.Context, client int, lease *lock.Lease, reg Register, between func()) IncOutput {
	call := time.Now()
	var out IncOutput
	out.Read, out.ReadOK, out.Err = reg.Read(ctx, lease.Token())
	if between != nil {
		between()
	}
	if out.ReadOK && out.Err == nil {
		out.Wrote, out.Err = reg.Write(ctx, lease.Token(), out.Read+1)
	}
	select {
	case <-lease.Lost():
		out.Lost = true
	default:
		out.Lost = !time.Now().Before(lease.Deadline())
	}
	h.Add(client, call, time.Now(), out)
	return out
}

// Add records an increment made from call to ret.
func (h *History) Add(client int, call, ret time.Time, out IncOutput) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Call: call.UnixNano(), Return: ret.UnixNano(), Output: out})
	if out.ReadOK && out.Wrote {
		h.won++
	}
}

// Won returns how many increments were admitted so far.
func (h *History) Won() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.won
}

// Refused returns how many increments the register refused, in part or
// whole.
func (h *History) Refused() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops) - int(h.won)
}

// Linearizable reports whether porcupine finds the history linearizable
// (within a minute).
func (h *History) Linearizable() bool {
	h.mu.Lock()
	ops := append([]porcupine.Operation(nil), h.ops...)
	h.mu.Unlock()
	res, _ := porcupine.CheckOperationsVerbose(IncModel, ops, time.Minute)
	return res == porcupine.Ok
}

// Check fails t unless the history has admitted increments and no register
// errors, porcupine finds it linearizable, and reg holds exactly the number
// of admitted increments. With exclusive, it also fails t when a holder
// whose lease was not known lost was refused by the register: that means
// two holders overlapped, which a lock may only allow after a lease ended
// (a store that lost its data, as a restarted Redis, allows more: pass
// false there, and let fencing alone keep the history linearizable).
func (h *History) Check(t testing.TB, reg Register, exclusive bool) {
	t.Helper()
	h.mu.Lock()
	ops := append([]porcupine.Operation(nil), h.ops...)
	won := h.won
	h.mu.Unlock()
	refused := 0
	for _, op := range ops {
		out := op.Output.(IncOutput)
		if out.Err != nil {
			t.Fatalf("client %d: register: %v", op.ClientId, out.Err)
		}
		if out.ReadOK && out.Wrote {
			continue
		}
		refused++
		if exclusive && !out.Lost {
			t.Fatalf("client %d was refused by the register while its lease was live (%s): two holders overlapped",
				op.ClientId, IncModel.DescribeOperation(nil, out))
		}
	}
	if len(ops) == 0 || won == 0 {
		t.Fatalf("no increment went through (%d operations)", len(ops))
	}
	res, _ := porcupine.CheckOperationsVerbose(IncModel, ops, time.Minute)
	if res != porcupine.Ok {
		t.Fatalf("history of %d operations is not linearizable (%s)", len(ops), res)
	}
	v, ok, err := reg.Read(context.Background(), math.MaxInt64/2)
	if err != nil || !ok {
		t.Fatalf("final read of the register: %v, %v", ok, err)
	}
	if v != won {
		t.Fatalf("register holds %d after %d admitted increments", v, won)
	}
	t.Logf("%d operations, %d admitted increments, %d refused, linearizable", len(ops), won, refused)
}
