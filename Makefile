.PHONY: test race bench lint fuzz run

# The README's test command: installs redis-server if missing, vets, runs every test with -race.
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
	go run honnef.co/go/tools/cmd/staticcheck@latest ./...

fuzz:
	go test -run '^$$' -fuzz FuzzRules -fuzztime 30s ./ratelimit

run:
	go run ./examples/ratelimit
