# syntax=docker/dockerfile:1
#
# inferpick's image, for those who build with Docker; `make image` builds
# the same images with Go alone. The default target is inferpick:
#
#   docker build --build-arg VERSION=0.1.0 --build-arg REVISION=$(git rev-parse HEAD) \
#     -t ghcr.io/inferpick/inferpick:0.1.0 .
#   docker build --target vllm-sim -t ghcr.io/inferpick/vllm-sim:0.1.0 .
#
# Multi-platform: docker buildx build --platform linux/amd64,linux/arm64 ...

ARG GO_VERSION=1.26.8
ARG BASE=gcr.io/distroless/static-debian12:nonroot

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
ARG REVISION=unknown
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    for cmd in inferpick vllm-sim; do \
      CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -tags vtprotobuf \
        -ldflags "-s -w -X github.com/inferpick/inferpick/cmd/internal/version.Version=${VERSION} -X github.com/inferpick/inferpick/cmd/internal/version.Revision=${REVISION}" \
        -o /out/$cmd ./cmd/$cmd || exit 1; \
    done

FROM ${BASE} AS vllm-sim
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title=vllm-sim \
      org.opencontainers.image.source=https://github.com/inferpick/inferpick \
      org.opencontainers.image.version=${VERSION} \
      org.opencontainers.image.revision=${REVISION}
COPY --from=build /out/vllm-sim /usr/local/bin/vllm-sim
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/vllm-sim"]

FROM ${BASE} AS inferpick
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title=inferpick \
      org.opencontainers.image.source=https://github.com/inferpick/inferpick \
      org.opencontainers.image.version=${VERSION} \
      org.opencontainers.image.revision=${REVISION}
COPY --from=build /out/inferpick /usr/local/bin/inferpick
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/inferpick"]
