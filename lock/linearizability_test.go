package lock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/lock"
	"github.com/floodgate-dev/floodgate/lock/internal/lockdriver"
)

// fencedRegister is the protected resource: a value in Redis that accepts a
// read or a write only with a fencing token not lower than the highest it has
// seen (reads count too, so that a stale holder cannot write a value computed
// from a read that a newer holder already superseded).
type fencedRegister struct {
	c     *redis.Client
	key   string
	fence bool // false: accept every token (the negative control)
}

var (
	regRead = redis.NewScript(`
local f = tonumber(redis.call('HGET', KEYS[1], 'f') or '0')
local t = tonumber(ARGV[1])
if ARGV[2] == '1' and t < f then return -1 end
if t > f then redis.call('HSET', KEYS[1], 'f', ARGV[1]) end
return tonumber(redis.call('HGET', KEYS[1], 'v') or '0')`)
	regWrite = redis.NewScript(`
local f = tonumber(redis.call('HGET', KEYS[1], 'f') or '0')
local t = tonumber(ARGV[1])
if ARGV[3] == '1' and t < f then return 0 end
if t > f then redis.call('HSET', KEYS[1], 'f', ARGV[1]) end
redis.call('HSET', KEYS[1], 'v', ARGV[2])
return 1`)
)

func (r fencedRegister) flag() string {
	if r.fence {
		return "1"
	}
	return "0"
}

func (r fencedRegister) read(ctx context.Context, token int64) (int64, bool) {
	v, err := regRead.Run(ctx, r.c, []string{r.key}, token, r.flag()).Int64()
	return v, err == nil && v >= 0
}

func (r fencedRegister) write(ctx context.Context, token, v int64) bool {
	n, err := regWrite.Run(ctx, r.c, []string{r.key}, token, v, r.flag()).Int64()
	return err == nil && n == 1
}

// incOutput is one locked increment: the value read, and whether the read
// and the write were admitted by the register.
type incOutput struct {
	read          int64
	readOK, wrote bool
}

// incModel: an increment that both read and wrote must have read the
// register's current value; a refused one changes nothing.
var incModel = porcupine.Model{
	Init: func() interface{} { return int64(0) },
	Step: func(state, _, output interface{}) (bool, interface{}) {
		s, out := state.(int64), output.(incOutput)
		if out.readOK && out.wrote {
			return out.read == s, s + 1
		}
		return true, s
	},
	DescribeOperation: func(_, output interface{}) string {
		o := output.(incOutput)
		return fmt.Sprintf("inc read=%d ok=%v wrote=%v", o.read, o.readOK, o.wrote)
	},
}

type history struct {
	mu  sync.Mutex
	ops []porcupine.Operation
	won int64
	// liveRefused counts operations the register refused while the holder's
	// lease was not yet known lost: with a correct lock, none.
	liveRefused int
}

func (h *history) add(client int, call, ret time.Time, out incOutput) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Call: call.UnixNano(), Return: ret.UnixNano(), Output: out})
	if out.readOK && out.wrote {
		h.won++
	}
}

// runClients has clients take the lock and increment the register; a client
// sometimes stalls inside the critical section for pause (0: never).
// Each Lock may wait lockTimeout.
func runClients(t *testing.T, mk func() lock.Locker, reg fencedRegister, clients, ops int, pause, lockTimeout time.Duration) *history {
	h := &history{}
	var wg sync.WaitGroup
	for c := range clients {
		mu := mk()
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 9))
			for range ops {
				lctx, lcancel := context.WithTimeout(context.Background(), lockTimeout)
				lease, err := mu.Lock(lctx)
				lcancel()
				if err != nil {
					continue // the store is down: no operation
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				call := time.Now()
				var out incOutput
				out.read, out.readOK = reg.read(ctx, lease.Token())
				if pause > 0 && rng.IntN(4) == 0 {
					time.Sleep(pause) // a GC pause, a swapped-out process...
				}
				if out.readOK {
					out.wrote = reg.write(ctx, lease.Token(), out.read+1)
				}
				h.add(c, call, time.Now(), out)
				if !out.readOK || !out.wrote {
					select {
					case <-lease.Lost():
					default:
						h.mu.Lock()
						h.liveRefused++
						h.mu.Unlock()
					}
				}
				_ = lease.Unlock(ctx)
				cancel()
			}
		}()
	}
	wg.Wait()
	return h
}

func checkHistory(t *testing.T, h *history, reg fencedRegister) {
	t.Helper()
	if len(h.ops) == 0 || h.won == 0 {
		t.Fatalf("no increment went through (%d operations)", len(h.ops))
	}
	res, _ := porcupine.CheckOperationsVerbose(incModel, h.ops, time.Minute)
	if res != porcupine.Ok {
		t.Fatalf("history of %d operations is not linearizable (%s)", len(h.ops), res)
	}
	v, _ := reg.read(context.Background(), 1<<62)
	if v != h.won {
		t.Fatalf("register holds %d after %d admitted increments", v, h.won)
	}
	t.Logf("%d operations, %d admitted increments, linearizable", len(h.ops), h.won)
}

func TestLinearizableUnderFaults(t *testing.T) {
	regSrv := testenv.SharedRedis(t)
	rc := redis.NewClient(&redis.Options{Addr: regSrv.Addr})
	defer rc.Close()
	ttl := 200 * time.Millisecond

	scenarios := []struct {
		name  string
		pause time.Duration
		fault func(*testenv.Redis)
		// lossy: clients reach Redis through a proxy that loses replies
		// (go-redis resends: MaxRetries 1) and stalls past the clients'
		// short Lock timeouts, and no holder may be overtaken while its
		// lease is live.
		lossy func(*testenv.Proxy)
	}{
		{"holders paused past their TTL", 3 * ttl, nil, nil},
		{"replies lost and resent, Locks failing mid-call", 0, nil, func(p *testenv.Proxy) {
			for i := range 30 {
				time.Sleep(20 * time.Millisecond)
				p.LoseNextReplies(1)
				if i%10 == 9 {
					p.Stall()
					time.Sleep(150 * time.Millisecond)
					p.Resume()
				}
			}
		}},
		{"Redis paused with SIGSTOP", 0, func(s *testenv.Redis) {
			for range 2 {
				time.Sleep(300 * time.Millisecond)
				_ = s.Pause()
				time.Sleep(2 * ttl)
				_ = s.Resume()
			}
		}, nil},
		{"Redis restarted without persistence", ttl, func(s *testenv.Redis) {
			time.Sleep(400 * time.Millisecond)
			if err := s.Restart(); err != nil {
				t.Errorf("restart: %v", err)
			}
		}, nil},
	}
	for i, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			srv := testenv.NewRedis(t)
			addr, retries, lockTimeout := srv.Addr, -1, 10*time.Second
			var p *testenv.Proxy
			if sc.lossy != nil {
				p = testenv.NewProxy(t, srv.Addr)
				addr, retries, lockTimeout = p.Addr(), 1, 100*time.Millisecond
			}
			// Clients pair up on a backend, as two processes of two
			// goroutines: local hand-offs and runs of passes (pass.go) are
			// in every history, beside hand-offs between processes.
			var shared *backend.Redis
			mk := func() lock.Locker {
				be := shared
				if be == nil {
					c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: retries, DialTimeout: 200 * time.Millisecond})
					t.Cleanup(func() { c.Close() })
					be = backendtest.NewRedis(t, c)
					shared = be
				} else {
					shared = nil
				}
				mu, err := lock.NewMutex(be, "register", lock.TTL(ttl), lock.MaxPoll(50*time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
				return mu
			}
			reg := fencedRegister{c: rc, key: fmt.Sprintf("register:%d:%s", i, lockdriver.NewOwnerID()), fence: true}
			done := make(chan struct{})
			switch {
			case sc.fault != nil:
				go func() { defer close(done); sc.fault(srv) }()
			case sc.lossy != nil:
				go func() { defer close(done); sc.lossy(p) }()
			default:
				close(done)
			}
			h := runClients(t, mk, reg, 4, 12, sc.pause, lockTimeout)
			<-done
			checkHistory(t, h, reg)
			if sc.lossy != nil {
				t.Logf("%d replies lost", p.Lost())
				if h.liveRefused > 0 {
					t.Fatalf("the register refused %d holders whose lease was live: holders overlapped", h.liveRefused)
				}
			}
		})
	}
}

// TestLinearizabilityCheckCatchesStaleWrites is the negative control: the
// same clients against a register that ignores tokens produce a history the
// checker rejects, so the test above can fail.
func TestLinearizabilityCheckCatchesStaleWrites(t *testing.T) {
	srv := testenv.SharedRedis(t)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rc.Close()
	m := backend.NewMemory()
	defer m.Close()
	reg := fencedRegister{c: rc, key: "register:unfenced", fence: false}
	ctx := context.Background()
	slow, _ := lock.NewMutex(m, "r", lock.TTL(50*time.Millisecond))
	fast, _ := lock.NewMutex(m, "r", lock.TTL(time.Second))
	h := &history{}
	// The slow holder reads, stalls past its TTL; the next holder reads the
	// same value and writes; the slow one then writes too.
	a, _ := slow.Lock(ctx)
	callA := time.Now()
	va, _ := reg.read(ctx, a.Token())
	<-a.Lost()
	b, _ := fast.Lock(ctx)
	callB := time.Now()
	vb, _ := reg.read(ctx, b.Token())
	okB := reg.write(ctx, b.Token(), vb+1)
	h.add(1, callB, time.Now(), incOutput{vb, true, okB})
	okA := reg.write(ctx, a.Token(), va+1)
	h.add(0, callA, time.Now(), incOutput{va, true, okA})
	if porcupine.CheckOperations(incModel, h.ops) {
		t.Fatal("two increments from the same read were judged linearizable")
	}
	// With fencing the stale write is refused and the history is fine.
	reg2 := fencedRegister{c: rc, key: "register:fenced", fence: true}
	if reg2.write(ctx, b.Token(), 1) != true || reg2.write(ctx, a.Token(), 1) != false {
		t.Fatal("the fenced register admitted a stale token")
	}
}
