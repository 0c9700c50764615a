// Command rlsfloor is the floor of the decision server's gRPC transport: an
// Envoy RLS v3 server on grpc-go, with the decision server's options, that
// answers every ShouldRateLimit with OK without reading the request's
// descriptors or deciding anything. serve.sh (FLOOR=1) loads it as it loads
// floodgate serve, so that the tables show what grpc-go alone costs on the
// machine: what the decision server cannot go below without another
// transport.
//
//	go run ./cmd/rlsfloor --addr 127.0.0.1:8081
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

type okServer struct {
	rls.UnimplementedRateLimitServiceServer
}

func (okServer) ShouldRateLimit(context.Context, *rls.RateLimitRequest) (*rls.RateLimitResponse, error) {
	return &rls.RateLimitResponse{OverallCode: rls.RateLimitResponse_OK,
		Statuses: []*rls.RateLimitResponse_DescriptorStatus{{Code: rls.RateLimitResponse_OK}}}, nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "gRPC `address` to listen on")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	// The decision server's transport options (server/server.go).
	srv := grpc.NewServer(grpc.NumStreamWorkers(64))
	rls.RegisterRateLimitServiceServer(srv, okServer{})
	fmt.Fprintf(os.Stderr, "rlsfloor: listening on %s\n", ln.Addr())
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		<-sig
		srv.Stop()
	}()
	if err := srv.Serve(ln); err != nil {
		log.Fatal(err)
	}
}
