# The README's second command: `make test`.
GO ?= go
BIN := bin

.PHONY: bench-tools test vet unit redis-server node openai-sdk anthropic-sdk chromium promtool build run docker-check bench bench-curves bench-tls bench-h2 bench-go bench-compare clean

test: redis-server openai-sdk anthropic-sdk chromium promtool vet unit docker-check

vet:
	$(GO) vet ./...
	$(GO) vet -tags pressure ./limiter/redislimit/ ./cmd/gateway/

# Packages in parallel; -artifacts keeps what tests save for people to look
# at (the status page's screenshot) under test-output/_artifacts/. Then the
# limit-under-pressure suites (build tag pressure), one package at a time:
# they count admissions against real time, and two of them flooding a
# 2-core machine at once would measure each other instead of the limiter.
unit:
	@mkdir -p test-output
	$(GO) test -race -count=1 -artifacts -outputdir $(CURDIR)/test-output ./...
	$(GO) test -race -count=1 -p 1 -tags pressure -run '^TestPressure' ./limiter/redislimit/ ./cmd/gateway/

# Tests that touch Redis start their own redis-server on a loopback port.
# Installs it when missing (as root), or says exactly what to install.
redis-server:
	@command -v redis-server >/dev/null && command -v redis-cli >/dev/null && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing redis-server (needed by the Redis tests)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; \
	else \
		echo "redis-server is missing: run 'sudo apt-get install -y redis-server' (Debian/Ubuntu) and try again" >&2; exit 1; \
	fi

# TestClientSDKs runs the client SDKs pinned in its package.json and lock
# (openai current major and 6.x, the Vercel AI SDK, LangChain JS) against the
# gateway, and TestAnthropicSDK the official Anthropic SDK. Node.js is
# installed when missing (as root), then each set of SDKs from npm.
node:
	@command -v node >/dev/null && command -v npm >/dev/null || { \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing nodejs and npm (needed by the SDK checks)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null; \
	else \
		echo "node is missing: run 'sudo apt-get install -y nodejs npm' (Debian/Ubuntu) and try again" >&2; exit 1; \
	fi; }

OPENAI_SDK := cmd/gateway/testdata/openai-sdk
openai-sdk: node
	npm ci --prefix $(OPENAI_SDK) --no-audit --no-fund --loglevel=error

ANTHROPIC_SDK := cmd/gateway/testdata/anthropic-sdk
anthropic-sdk: node
	npm ci --prefix $(ANTHROPIC_SDK) --no-audit --no-fund --loglevel=error

# TestStatusPageInABrowser drives Debian's chromium, headless, against a
# running gateway. Installs it when missing (as root).
chromium:
	@command -v chromium >/dev/null && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing chromium (needed by the status page check)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else \
		echo "chromium is missing: run 'sudo apt-get install -y chromium' (Debian) and try again" >&2; exit 1; \
	fi

# TestPrometheusAlertsNameExportedMetrics checks deploy/prometheus's rules
# with promtool, from Debian's prometheus package. Installs it when missing
# (as root; the package's service is not started by the install here).
promtool:
	@command -v promtool >/dev/null && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing prometheus (its promtool checks the alert rules)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	else \
		echo "promtool is missing: run 'sudo apt-get install -y --no-install-recommends prometheus' (Debian) and try again" >&2; exit 1; \
	fi

build:
	$(GO) build -o $(BIN)/gateway ./cmd/gateway

run:
	$(GO) run ./cmd/gateway

# No Docker engine here: build with the Dockerfile's exact `go build` line and
# check the result is static and runs.
docker-check:
	@set -e; out=$$(mktemp -d); \
	line=$$(sed -n 's/^RUN \(CGO_ENABLED=0 go build .*\)$$/\1/p' Dockerfile); \
	[ -n "$$line" ] || { echo "docker-check: no 'RUN CGO_ENABLED=0 go build' line in Dockerfile" >&2; exit 1; }; \
	echo "docker-check: $$line"; \
	sh -c "$$(echo "$$line" | sed "s#/out/gateway#$$out/gateway#; s#\$${VERSION}#docker-check#")"; \
	$(GO) version -m $$out/gateway | grep -q 'CGO_ENABLED=0' || { echo "docker-check: binary is not static" >&2; exit 1; }; \
	$$out/gateway version; \
	$$out/gateway check -config gateway.yaml >/dev/null; \
	rm -rf $$out; echo "docker-check: ok"

# The side-by-side benchmark (bench/README.md): the gateway beside nginx,
# HAProxy, Caddy and a bare httputil proxy on loopback, and the Go benchmarks
# of local key memory and Redis capacity; writes a new
# bench/results/<date>-<N>cpu.txt in Go's benchmark format, with RATIO and
# TARGET lines. Flags through BENCHFLAGS, e.g. BENCHFLAGS='-rounds 3 -duration 2s'.
bench: bench-tools
	$(GO) run ./bench/sidebyside -go $(GO) $(BENCHFLAGS)
	$(GO) run ./bench/sidebyside -go $(GO) -h2 $(BENCHFLAGS)

# The HTTP/2 targets alone (h2load over h2c: the gateway beside nginx and
# Caddy) and gRPC calls through the gateway beside direct ones.
bench-h2: bench-tools
	$(GO) run ./bench/sidebyside -go $(GO) -h2 $(BENCHFLAGS)

# What the side-by-side runs besides Go: installed when missing (as root),
# or named with the command to install them.
BENCH_TOOLS := wrk:wrk h2load:nghttp2-client nginx:nginx-light haproxy:haproxy caddy:caddy redis-server:redis-server
bench-tools:
	@missing=$$(for t in $(BENCH_TOOLS); do command -v $${t%%:*} >/dev/null || echo $${t#*:}; done); \
	[ -z "$$missing" ] && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing" $$missing; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	else \
		echo "missing:" $$missing "- run: sudo apt-get install -y" $$missing >&2; exit 1; \
	fi

# How cost grows with policies on a route and routes in the config, each
# beside gateway-local in the same run. Flags through BENCHFLAGS.
bench-curves: bench-tools
	$(GO) run ./bench/sidebyside -go $(GO) -only curves -open-rounds 0 -memory=false -capacity=false -rounds 3 $(BENCHFLAGS)

# The gateway, Caddy and nginx terminating TLS, each beside its plain twin,
# with the CPU a request costs each. Flags through BENCHFLAGS.
bench-tls: bench-tools
	$(GO) run ./bench/sidebyside -go $(GO) -only tls -open-rounds 0 -memory=false -capacity=false $(BENCHFLAGS)

# The in-process Go benchmarks, each against its anchor.
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# Before and after: make bench-compare OLD=old.txt NEW=new.txt (results of
# make bench or of go test -bench -count 6), summarised by benchstat.
BENCHSTAT = $(GO) run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
bench-compare:
	$(BENCHSTAT) $(OLD) $(NEW)

clean:
	rm -rf $(BIN)
