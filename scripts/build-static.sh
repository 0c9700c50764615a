#!/bin/sh
# scripts/build-static.sh OUTPUT
#
# Builds the floodgate command as a static, reproducible binary at OUTPUT. It
# is the one place the release build's flags are written: the Dockerfile runs
# it, and deploy/deploy_test.go runs it twice (from this tree and from a copy
# of it elsewhere) and requires byte-identical, statically linked output.
#
#   CGO_ENABLED=0       pure Go: no libc, no dynamic loader (runs on scratch/distroless)
#   GOFLAGS=            the caller's GOFLAGS (-race, -tags, -cover...) never change the binary
#   GOWORK=off          a go.work above the checkout never changes the modules
#   -trimpath           no file system paths of this machine in the binary
#   -buildvcs=false     no VCS stamp: the bytes depend on the sources, not on .git
#   -mod=readonly       go.mod and go.sum as committed; a mismatch fails the build
#   -ldflags -s -w      no symbol table or DWARF
#   -buildid=           no build ID (a hash of the inputs, not needed at run time)
#
# The same sources, Go version and GOOS/GOARCH (and GOAMD64, GOARM64...) give
# the same bytes. GOOS and GOARCH are taken from the environment (the
# Dockerfile sets them from the target platform).
set -eu
out=${1:?usage: scripts/build-static.sh OUTPUT}
case $out in /*) ;; *) out=$PWD/$out ;; esac
cd "$(dirname "$0")/.."
export CGO_ENABLED=0
export GOFLAGS=
export GOWORK=off
exec go build -trimpath -buildvcs=false -mod=readonly -ldflags='-s -w -buildid=' -o "$out" ./cmd/floodgate
