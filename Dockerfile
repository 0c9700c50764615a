# syntax=docker/dockerfile:1
#
# floodgate's container image: a static binary on distroless, as a non-root user.
#
#   docker build -t floodgate:dev .
#   docker run --rm -p 8080:8080 -p 8081:8081 floodgate:dev          # examples/floodgate.yaml, memory backend
#   docker run --rm -p 8080:8080 -p 8081:8081 -v "$PWD/conf:/etc/floodgate:ro" \
#       floodgate:dev --config /etc/floodgate/ --redis redis://redis:6379
#
# The binary is built by scripts/build-static.sh, the one place its flags are
# written. deploy/deploy_test.go runs that script twice and requires identical,
# statically linked bytes, so with the same Go version (GO_VERSION below) and
# target, `./scripts/build-static.sh floodgate` outside Docker builds the same
# binary as this file does.

# The go line of go.mod asks for Go >= 1.26.0; the build uses exactly this
# release (GOTOOLCHAIN=local: no toolchain download behind the pin's back).
ARG GO_VERSION=1.26.8

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG TARGETOS
ARG TARGETARCH
ENV GOTOOLCHAIN=local
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    GOOS=${TARGETOS} GOARCH=${TARGETARCH} ./scripts/build-static.sh /out/floodgate

# distroless static: CA certificates, /etc/passwd with nonroot (65532), tzdata;
# no shell, no libc.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/floodgate /usr/local/bin/floodgate
# A sample configuration (limits in process, no Redis); mount your own
# directory over /etc/floodgate/.
COPY examples/floodgate.yaml /etc/floodgate/floodgate.yaml
# Numeric, so that Kubernetes' runAsNonRoot can verify it.
USER 65532:65532
# 8080: HTTP (/v1/check, /json, /healthz, /readyz, /metrics, /ui/); 8081: gRPC (Envoy RLS v3).
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/floodgate", "serve"]
CMD ["--config", "/etc/floodgate/"]
