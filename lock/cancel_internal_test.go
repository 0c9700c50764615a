package lock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/callid"
	"github.com/floodgate-dev/floodgate/internal/redisstore"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
	"github.com/floodgate-dev/floodgate/lock/internal/lockdriver"
)

// The orderings of an abandoned acquire and its cancel, run one script at a
// time: cancel first, acquire after, acquire resent after the cancel, the
// cancel run twice, and a re-entry of an Owner cancelled twice.
func TestCancelOrderings(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: testenv.SharedRedis(t).Addr})
	t.Cleanup(func() { c.Close() })
	r := backendtest.NewRedis(t, c, backend.WithPrefix("lc"))
	rs := unwrap.Redis(r)
	ctx := context.Background()
	ttl := 30 * time.Second

	newDriver := func(t *testing.T, owner string) *redisDriver {
		o, err := lockdriver.BuildOptions([]Option{TTL(ttl), Owner(owner)})
		if err != nil {
			t.Fatal(err)
		}
		return newRedisDriver(rs, t.Name()+lockdriver.NewOwnerID()[:6], o)
	}
	acquire := func(t *testing.T, d *redisDriver, owner, call string) []int64 {
		t.Helper()
		reply, err := rs.Run(ctx, acquireScript, d.callKeys(call), []string{
			"", owner, micros(ttl), "0", "0", micros(3 * time.Second), call, boolArg(d.o.Owner != ""),
		})
		if err != nil {
			t.Fatal(err)
		}
		v, err := redisstore.ReplyInts(reply, 2)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cancel := func(t *testing.T, d *redisDriver, owner, call string) int64 {
		t.Helper()
		reply, err := rs.Run(ctx, cancelScript, d.callKeys(call), []string{
			"", owner, call, micros(ttl), d.channel, boolArg(d.o.Owner != ""),
		})
		if err != nil {
			t.Fatal(err)
		}
		return reply.(int64)
	}
	free := func(t *testing.T, d *redisDriver) bool {
		t.Helper()
		v := acquire(t, d, "probe-"+lockdriver.NewOwnerID(), callid.New())
		if v[0] == 1 {
			if err := d.Release(ctx, ""); err == nil {
				t.Fatal("released for the empty owner")
			}
			_, _ = rs.Run(ctx, redisstore.NewScript("return redis.call('DEL', KEYS[1])"), d.keys[:1], nil)
		}
		return v[0] == 1
	}

	t.Run("cancel before the acquire lands", func(t *testing.T) {
		d := newDriver(t, "")
		owner, call := lockdriver.NewOwnerID(), callid.New()
		if n := cancel(t, d, owner, call); n != 0 {
			t.Fatalf("cancel of a call that never ran: %d, want 0", n)
		}
		if v := acquire(t, d, owner, call); v[0] != 0 || v[1] != -1 {
			t.Fatalf("acquire after its cancel: %v, want refused {0 -1}", v)
		}
		if !free(t, d) {
			t.Fatal("lock held after a refused acquire")
		}
	})
	t.Run("cancel after the acquire landed, then resent", func(t *testing.T) {
		d := newDriver(t, "")
		owner, call := lockdriver.NewOwnerID(), callid.New()
		first := acquire(t, d, owner, call)
		if first[0] != 1 {
			t.Fatalf("acquire: %v", first)
		}
		if again := acquire(t, d, owner, call); again[0] != 1 || again[1] != first[1] {
			t.Fatalf("resent acquire: %v, want the same token %d", again, first[1])
		}
		if n := cancel(t, d, owner, call); n != 1 {
			t.Fatalf("cancel of a landed call: %d, want 1", n)
		}
		if n := cancel(t, d, owner, call); n != 0 {
			t.Fatalf("cancel run twice: %d, want 0", n)
		}
		if v := acquire(t, d, owner, call); v[0] != 0 {
			t.Fatalf("acquire resent after the cancel: %v, want refused", v)
		}
		if !free(t, d) {
			t.Fatal("lock held after the cancel")
		}
	})
	t.Run("a cancelled re-entry gives back one level", func(t *testing.T) {
		d := newDriver(t, "own")
		a, b := callid.New(), callid.New()
		ga := acquire(t, d, "own", a)
		gb := acquire(t, d, "own", b) // re-entry: two levels
		if ga[0] != 1 || gb[0] != 1 || ga[1] != gb[1] {
			t.Fatalf("acquire %v, re-entry %v", ga, gb)
		}
		if n := cancel(t, d, "own", b); n != 1 {
			t.Fatalf("cancel of the re-entry: %d, want 1", n)
		}
		if n := cancel(t, d, "own", b); n != 0 {
			t.Fatalf("cancel run twice: %d, want 0", n)
		}
		if free(t, d) {
			t.Fatal("the first level went too")
		}
		if err := d.Release(ctx, "own"); err != nil {
			t.Fatalf("release of the remaining level: %v", err)
		}
		if !free(t, d) {
			t.Fatal("lock held after its one remaining level was released")
		}
	})
}
