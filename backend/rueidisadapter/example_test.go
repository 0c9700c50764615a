package rueidisadapter_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/backend/rueidisadapter"
	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/redis/rueidis"
)

// A floodgate Redis backend over a rueidis client. The client may be a
// standalone, Cluster or Sentinel one; keep auto-pipelining on (the default)
// so that concurrent decisions share connections.
func ExampleNew() {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	r, err := rueidisadapter.New(c, backend.WithPrefix("myapp"))
	if err != nil {
		log.Fatal(err)
	}

	// The backend goes wherever a backend.Backend is taken. Scripts run
	// with EVALSHA, falling back to EVAL on NOSCRIPT.
	lim, err := ratelimit.New(r, ratelimit.GCRA{Rate: 10, Per: time.Second, Burst: 20})
	if err != nil {
		log.Fatal(err)
	}
	res, err := lim.Allow(context.Background(), "user:42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Allowed)
}
