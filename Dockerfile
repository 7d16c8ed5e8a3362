# syntax=docker/dockerfile:1

# Build on the host's platform and cross-compile for the target, so
# multi-arch images need no emulation.
FROM --platform=$BUILDPLATFORM golang:1.26-bookworm AS build
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src
# Module download in its own layer: it is reused until go.mod/go.sum change.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Empty data dir, copied into the final stage with the runtime user's owner.
RUN mkdir -p /out/data
# CGO off: a static binary needs no libc, so it runs on distroless/static.
ENV CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH
RUN go build -trimpath -ldflags="-s -w" -o /out/fenceproxy ./cmd/fenceproxy

# distroless/static: no shell or package manager, just CA certs and tzdata.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/fenceproxy /fenceproxy
# The data directory must exist and be owned by the runtime user before the
# VOLUME is declared, so a fresh named volume inherits that ownership.
COPY --from=build --chown=65532:65532 --chmod=0700 /out/data/ /var/lib/fenceproxy/
ENV FENCEPROXY_DATA_DIR=/var/lib/fenceproxy
# The only path the proxy writes to: mount it writable (it must stay writable
# when the root filesystem is read-only). One process per directory.
# (Only `fenceproxy demo` also needs a writable /tmp, e.g. a tmpfs.)
VOLUME ["/var/lib/fenceproxy"]
# nonroot (65532) from distroless, numeric so runAsNonRoot can verify it.
USER 65532:65532
# 8080: proxy listener (every interface); 9090: control listener (/healthz,
# /readyz, /metrics, leases), on the container's loopback unless
# FENCEPROXY_CONTROL_LISTEN=:9090 is set, which needs FENCEPROXY_LEASE_TOKEN
# (or FENCEPROXY_LEASE_OPEN=true).
EXPOSE 8080 9090
ENTRYPOINT ["/fenceproxy"]
