package rueidisadapter_test

import (
	"context"
	"fmt"
	"log"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/backend/rueidisadapter"
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

	// Scripts run with EVALSHA, falling back to EVAL on NOSCRIPT.
	hits := backend.NewScript(`return redis.call("INCR", KEYS[1])`)
	n, err := r.Run(context.Background(), hits, []string{r.Key("user:42", "hits")}, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(n.(int64) > 0) // Redis integers arrive as int64
}
