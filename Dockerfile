# Multi-stage: a static binary on a minimal base, running as non-root.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.version=${VERSION}" -o /out/gateway ./cmd/gateway

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/gateway /usr/local/bin/gateway
COPY gateway.yaml /etc/gateway/gateway.yaml
# The default config listens on loopback; inside a container listen on all interfaces.
ENV GATEWAY_SERVER_LISTEN=0.0.0.0:8080
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/gateway"]
CMD ["serve", "-config", "/etc/gateway/gateway.yaml"]
