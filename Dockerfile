# warden: one static binary for every role (gateway, worker, up, admin).
#
#   docker build -t warden .
#   docker run --rm -p 8443:8443 warden            # `warden up`, everything in one container
#   docker compose up                              # one container per process: see docker-compose.yml
#
# The cpu backend only: the cuda backend needs cgo, -tags cuda and a CUDA
# base image (docs/cuda.md).

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# Static (no cgo): runs on any glibc, no CUDA linked.
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/warden-ai/warden/cmd/warden/cli.Version=${VERSION}" \
      -o /out/warden ./cmd/warden

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 warden \
 && useradd --system --uid 10001 --gid warden --home-dir /state --shell /usr/sbin/nologin warden \
 && mkdir -p /state \
 && chown warden:warden /state
COPY --from=build /out/warden /usr/local/bin/warden
# /state is the state dir of `warden up` and the volume of docker-compose.yml;
# a new named volume takes this directory's owner.
USER warden:warden
WORKDIR /state
# API, admin, registry, worker control, KV transfer, worker metrics.
EXPOSE 8443 8444 8445 9001 9101 9201
ENTRYPOINT ["warden"]
CMD ["up", "--state-dir", "/state", "--listen", "0.0.0.0:8443"]
