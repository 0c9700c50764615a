// Package bench compares floodgate's rate limiters with peer libraries and
// with client-side and server-side ceilings. It is a separate module, so that
// the peers' dependencies never reach floodgate's own go.mod.
//
// Everything is a `go test -bench` benchmark; run.sh runs the whole
// comparison and benchstat, and cmd/summary turns the output into the tables
// of results/README.md. The benchmarks start one private redis-server
// (internal/testenv), never the machine's own.
//
//	BenchmarkRedis/lib=L/alg=A/keys=K/g=G   decisions/s, p50-µs, p99-µs, server-µs/op, server-busy,
//	                                        script-µs/op, denied/op, allocs/op
//	BenchmarkMemory/lib=L/alg=A/keys=K/g=G  ns/op, allocs/op
//	BenchmarkRedisFootprint/lib=L/alg=A     B/key and redis-keys/key for 100,000 user keys
//	BenchmarkMemoryFootprint/lib=L/alg=A    B/key for 1,000,000 idle keys, and after expiry and Sweep
//	BenchmarkServerCeiling/...              redis-benchmark -P 16 running the minimal GCRA script
//	BenchmarkDecisionServer/store=S/via=V/keys=K/g=64  the decision server against the library on the same
//	                                        store: decisions/s, p50-µs, p99-µs (results/server.md)
//
// serve.sh measures floodgate serve as a separate process under floodgate
// bench, against cmd/rlsfloor (grpc-go answering without deciding),
// cmd/libload (the library on the same Redis) and envoyproxy/ratelimit
// (built from its module at run time, on the same Redis with the same
// configuration and environment); cmd/servesummary writes the tables of
// results/server.md. instructions.sh counts, under valgrind's callgrind, the
// instructions floodgate serve executes per decision, for two builds
// (results/issue26.md).
//
// G is the number of goroutines, started explicitly (not b.RunParallel), so
// it does not depend on GOMAXPROCS. The b.N calls are split evenly among them.
package bench
