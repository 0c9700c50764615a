package backend_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/memstore"
	"github.com/floodgate-dev/floodgate/internal/redisstore"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

func TestCheckKey(t *testing.T) {
	if err := backend.CheckKey(""); !errors.Is(err, backend.ErrEmptyKey) {
		t.Errorf("empty: %v", err)
	}
	if err := backend.CheckKey(strings.Repeat("x", backend.MaxKeyLen+1)); !errors.Is(err, backend.ErrKeyTooLong) {
		t.Errorf("long: %v", err)
	}
	if err := backend.CheckKey("user:1"); err != nil {
		t.Errorf("plain: %v", err)
	}
}

func TestRedisKeyHashTag(t *testing.T) {
	r := backendtest.NewRedis(t, redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), backend.WithPrefix("app"))
	rs := unwrap.Redis(r)
	cases := map[string]string{
		"alice": "app:{alice}:s",
		"}x":    "app:{%7Dx}:s",
		"a{b}":  "app:{a%7Bb%7D}:s",
		"%7D":   "app:{%257D}:s",
	}
	for tag, want := range cases {
		if got := rs.Key(tag, "s"); got != want {
			t.Errorf("Key(%q) = %q, want %q", tag, got, want)
		}
	}
	if _, err := backend.NewRedis(redis.NewClient(&redis.Options{}), backend.WithPrefix("a{b")); err == nil {
		t.Error("a prefix with a brace was accepted")
	}
	if _, err := backend.NewRedis(nil); err == nil {
		t.Error("a nil client was accepted")
	}
	if rs.NowArg() != "" {
		t.Errorf("without an injected clock scripts must call TIME, got now=%q", rs.NowArg())
	}
	fk := clock.NewFake(time.UnixMicro(1234567))
	if got := unwrap.Redis(backendtest.NewRedis(t, redis.NewClient(&redis.Options{}), backend.WithClock(fk))).NowArg(); got != "1234567" {
		t.Errorf("NowArg with a fake clock = %q", got)
	}
}

func TestScriptNoScriptFallback(t *testing.T) {
	srv := testenv.SharedRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	r := backendtest.NewRedis(t, c)
	rs := unwrap.Redis(r)
	s := redisstore.NewScript("return {tonumber(ARGV[1]) + 1, KEYS[1]}")
	ctx := context.Background()
	for range 2 {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		reply, err := rs.Run(ctx, s, []string{"k"}, []string{"41"})
		if err != nil {
			t.Fatal(err)
		}
		arr := reply.([]any)
		if arr[0] != int64(42) || arr[1] != "k" {
			t.Fatalf("reply %v", arr)
		}
	}
	if _, err := rs.Run(ctx, redisstore.NewScript("return redis.error_reply('boom')"), nil, nil); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("error reply: %v", err)
	}
	if reply, err := rs.Run(ctx, redisstore.NewScript("return nil"), nil, nil); err != nil || reply != nil {
		t.Errorf("nil reply: %v %v", reply, err)
	}
}

func TestMemorySweep(t *testing.T) {
	fk := clock.NewFake(time.Unix(1_700_000_000, 0))
	m := backend.NewMemory(backend.WithClock(fk), backend.WithSweepInterval(time.Hour))
	ms := unwrap.Memory(m)
	defer m.Close()
	tb := ms.Table("t")
	now := tb.NowMicros()
	for i := range 1000 {
		key := "k" + string(rune('a'+i%26)) + strings.Repeat("x", i%7) + string(rune(i))
		sh := tb.Shard(key)
		sh.Lock()
		exp := now + 1_000_000 // 1s
		if i%2 == 0 {
			exp = 0 // never
		}
		sh.Put(key, &memstore.Entry{Expires: exp})
		sh.Unlock()
	}
	if n := ms.Len(); n != 1000 {
		t.Fatalf("Len = %d", n)
	}
	if n := m.Sweep(); n != 0 {
		t.Fatalf("swept %d before expiry", n)
	}
	fk.Advance(time.Second)
	if n := m.Sweep(); n != 500 {
		t.Fatalf("swept %d at expiry, want 500", n)
	}
	if n := ms.Len(); n != 500 {
		t.Fatalf("Len after sweep = %d", n)
	}
}

func TestMemoryJanitorBoundsIdleKeys(t *testing.T) {
	fk := clock.NewFake(time.Unix(1_700_000_000, 0))
	m := backend.NewMemory(backend.WithClock(fk), backend.WithSweepInterval(20*time.Millisecond))
	ms := unwrap.Memory(m)
	defer m.Close()
	lim, err := ratelimit.New(m, ratelimit.GCRA{Rate: 100, Per: time.Second, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10000 {
		if _, err := lim.Allow(context.Background(), "idle:"+strings.Repeat("k", i%10)+string(rune(i+1))); err != nil {
			t.Fatal(err)
		}
	}
	if n := ms.Len(); n != 10000 {
		t.Fatalf("Len = %d, want 10000", n)
	}
	// Each key's state is worthless 10ms after its call; the janitor removes it.
	fk.Advance(time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for ms.Len() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := ms.Len(); n != 0 {
		t.Fatalf("%d idle keys left after their expiry", n)
	}
}

func TestSentinelFailover(t *testing.T) {
	s := testenv.SharedSentinel(t)
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.SentinelAddrs})
	defer c.Close()
	lim, err := ratelimit.New(backendtest.NewRedis(t, c, backend.WithPrefix(fmt.Sprintf("failover%d", time.Now().UnixNano()))), ratelimit.TokenBucket{Capacity: 10, Refill: 1, Every: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := lim.AllowN(ctx, "k", 4); err != nil {
		t.Fatal(err)
	}
	// Replication is asynchronous: a failover keeps only what reached the
	// replica, so wait for it as an application needing this would.
	if n, err := c.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n < 1 {
		t.Fatalf("WAIT 1 5000 = %d, %v", n, err)
	}
	if _, err := s.Failover(ctx); err != nil {
		t.Fatal(err)
	}
	// The client follows the new master; the state was replicated.
	var r ratelimit.Result
	deadline := time.Now().Add(15 * time.Second)
	for {
		r, err = lim.AllowN(ctx, "k", 1)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("no decision after the failover: %v", err)
	}
	if !r.Allowed || r.Remaining != 5 {
		t.Errorf("after failover got %+v, want allowed with Remaining 5 (state kept)", r)
	}
}

func TestSubscribePublish(t *testing.T) {
	srv := testenv.SharedRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	r := backendtest.NewRedis(t, c)
	rs := unwrap.Redis(r)
	defer r.Close()
	ctx := context.Background()
	a, err := rs.Subscribe(ctx, "ch1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := rs.Subscribe(ctx, "ch1")
	if err != nil {
		t.Fatal(err)
	}
	other, err := rs.Subscribe(ctx, "ch2")
	if err != nil {
		t.Fatal(err)
	}
	// Subscribe returns once Redis has the subscription: one PUBLISH
	// reaches both subscriptions of ch1.
	if err := rs.Publish(ctx, "ch1", "hello"); err != nil {
		t.Fatal(err)
	}
	for i, s := range []*redisstore.Subscription{a, b} {
		select {
		case m := <-s.C:
			if m != "hello" {
				t.Fatalf("subscription %d of ch1 got %q, want hello", i, m)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("subscription %d of ch1 got nothing 5s after the one PUBLISH", i)
		}
	}
	select {
	case m := <-other.C:
		t.Fatalf("ch2 received %q", m)
	default:
	}
	a.Close()
	a.Close() // idempotent
	b.Close()
	other.Close()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestMemorySweepReturnsMemory checks that a million idle keys cost little
// once they expired and were swept: the shard maps are rebuilt.
func TestMemorySweepReturnsMemory(t *testing.T) {
	fk := clock.NewFake(time.Unix(1_700_000_000, 0))
	m := backend.NewMemory(backend.WithClock(fk), backend.WithSweepInterval(time.Hour))
	defer m.Close()
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	tb := unwrap.Memory(m).Table("t")
	exp := tb.NowMicros() + 1
	for i := range 200_000 {
		key := strconv.Itoa(i)
		sh := tb.Shard(key)
		sh.Lock()
		sh.Put(key, &memstore.Entry{Expires: exp})
		sh.Unlock()
	}
	full := heap()
	fk.Advance(time.Second)
	if n := m.Sweep(); n != 200_000 {
		t.Fatalf("swept %d", n)
	}
	after := heap()
	perKey := float64(full-before) / 200_000
	left := float64(int64(after)-int64(before)) / 200_000
	if left > perKey/10 {
		t.Fatalf("%.1f B/key while full, %.1f B/key left after the sweep", perKey, left)
	}
}
