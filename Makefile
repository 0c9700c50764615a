.PHONY: test race bench lint fuzz run charts

# The README's test command: installs the servers the tests start if missing, vets, runs every test with -race.
test:
	./scripts/test.sh

race:
	go test -race -count=1 ./...

# Memory-backend benchmarks of this module; bench/ compares against peer libraries.
bench:
	go test -run '^$$' -bench . -benchmem ./...
	cd bench && ./run.sh

lint:
	gofmt -l . | (! grep .)
	go vet ./...
	go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	cd bench && go vet ./... && go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

# Each fuzzer's seeds (f.Add and testdata/fuzz) also run in every go test.
fuzz:
	go test -run '^$$' -fuzz FuzzRules -fuzztime 30s ./ratelimit
	go test -run '^$$' -fuzz FuzzKey -fuzztime 30s ./internal/longkey
	go test -run '^$$' -fuzz FuzzSimulateParseTraffic -fuzztime 300000x ./internal/simulate
	go test -run '^$$' -fuzz FuzzCheckRequestReference -fuzztime 30s ./server/checkapi
	go test -run '^$$' -fuzz '^FuzzRLSWire$$' -fuzztime 30s ./server
	go test -run '^$$' -fuzz '^FuzzCheckRequest$$' -fuzztime 30s ./server
	go test -run '^$$' -fuzz FuzzRLSRequest -fuzztime 30s ./server

run:
	go run ./examples/ratelimit

# The charts of docs/algorithms.md, drawn by floodgate simulate: the six algorithms
# under one boundary attack (10 requests just before a 1s window edge, 10 just after).
charts:
	go run ./cmd/floodgate simulate --all --limit 10 --per 1s --burst 10 --traffic boundary \
		--out docs/img/boundary.svg
