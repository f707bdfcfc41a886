package policies

import (
	"reflect"
	"testing"
	"time"
)

func withIdempotency(body string) string {
	return `
routes:
  - {name: r, upstream: "http://127.0.0.1:9000", idempotency: ` + body + `}
`
}

// An empty block turns idempotency on with every default; a route without
// one has none.
func TestIdempotencyDefaults(t *testing.T) {
	snap := mustParse(t, withIdempotency("{}")+`  - {name: plain, upstream: "http://127.0.0.1:9000"}`+"\n")
	got := snap.Routes[0].Idempotency
	want := &Idempotency{
		Header: "Idempotency-Key", FencingHeader: "X-Fencing-Token", Methods: []string{"POST", "PATCH"},
		LockTTL: 10 * time.Second, ReplayTTL: 24 * time.Hour, MaxResponseBytes: 1 << 20,
		ReplayHeaders: []string{"Content-Type", "Content-Language", "Location", "Etag", "Cache-Control"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("defaults:\n got %+v\nwant %+v", got, want)
	}
	if snap.Routes[1].Idempotency != nil {
		t.Fatalf("a route without the block: %+v, want nil", snap.Routes[1].Idempotency)
	}
	if !got.Applies("POST") || got.Applies("GET") {
		t.Fatal("Applies: want POST yes, GET no")
	}
	full := mustParse(t, withIdempotency(`{header: x-order-id, methods: [put, post], required: true, lock_ttl: 30s,
      replay_ttl: 1h, max_response_bytes: 4096, replay_headers: [content-type], fencing_header: x-fence,
      on_conflict: wait, max_wait: 2s, on_redis_error: allow}`)).Routes[0].Idempotency
	want = &Idempotency{
		Header: "X-Order-Id", FencingHeader: "X-Fence", Methods: []string{"PUT", "POST"}, Required: true,
		LockTTL: 30 * time.Second, ReplayTTL: time.Hour, MaxResponseBytes: 4096, ReplayHeaders: []string{"Content-Type"},
		Wait: true, MaxWait: 2 * time.Second, FailOpen: true,
	}
	if !reflect.DeepEqual(full, want) {
		t.Fatalf("full block:\n got %+v\nwant %+v", full, want)
	}
}

func TestIdempotencyValidationErrors(t *testing.T) {
	const place = "gateway.yaml: routes[0].idempotency."
	tests := []struct{ name, body, want string }{
		{"unknown key", "{ttl: 1s}", place + "ttl: unknown key (known: fencing_header, header, lock_ttl, max_response_bytes, max_wait, methods, on_conflict, on_redis_error, replay_headers, replay_ttl, require_api_key, required)"},
		{"bad header", `{header: "a b"}`, place + `header: must be a header name, got "a b"`},
		{"same headers", `{fencing_header: idempotency-key}`, place + `fencing_header: must differ from header ("Idempotency-Key")`},
		{"no methods", `{methods: []}`, place + "methods: must name at least one method (default [POST, PATCH])"},
		{"method twice", `{methods: [post, POST]}`, place + "methods[1]: method POST listed twice"},
		{"lock ttl short", `{lock_ttl: 10ms}`, place + "lock_ttl: must be at least 30ms (it is renewed every third of it), got 10ms"},
		{"replay ttl short", `{replay_ttl: 10ms}`, place + "replay_ttl: must be at least 1s, got 10ms"},
		{"negative size", `{max_response_bytes: -1}`, place + "max_response_bytes: must be > 0 and at most 16777216 (16 MiB), got -1"},
		{"size past the ceiling", `{max_response_bytes: 16777217}`, place + "max_response_bytes: must be > 0 and at most 16777216 (16 MiB), got 16777217"},
		{"content-length replayed", `{replay_headers: [content-length]}`, place + "replay_headers[0]: Content-Length is set by the gateway on each response; it cannot be replayed"},
		{"bad conflict", `{on_conflict: queue}`, place + `on_conflict: must be reject or wait, got "queue"`},
		{"wait without reject", `{max_wait: 1s}`, place + "max_wait: applies to on_conflict: wait only"},
		{"bad redis mode", `{on_redis_error: local}`, place + `on_redis_error: must be deny or allow, got "local"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantLine(t, errorLines(t, withIdempotency(tt.body)), tt.want)
		})
	}
	unbounded := `
routes:
  - {name: r, upstream: "http://127.0.0.1:9000", max_body_bytes: -1, idempotency: {}}
`
	wantLine(t, errorLines(t, unbounded), "gateway.yaml: routes[0].max_body_bytes: a route with idempotency reads the body to fingerprint it: it needs a limit, not -1")
}

// server.idempotency_max_bytes bounds the in-process store: too small is an
// error, and so is a route whose responses it could never keep.
func TestIdempotencyMaxBytesValidation(t *testing.T) {
	tests := []struct{ name, yaml, want string }{
		{"negative", `
server: {idempotency_max_bytes: -1}
routes: [{name: r, upstream: "http://127.0.0.1:9000"}]
`, "gateway.yaml: server.idempotency_max_bytes: must be at least 65536 (64 KiB), got -1"},
		{"below the minimum", `
server: {idempotency_max_bytes: 1000}
routes: [{name: r, upstream: "http://127.0.0.1:9000"}]
`, "gateway.yaml: server.idempotency_max_bytes: must be at least 65536 (64 KiB), got 1000"},
		{"a response it cannot hold", `
server: {idempotency_max_bytes: 1048576}
routes: [{name: r, upstream: "http://127.0.0.1:9000", idempotency: {max_response_bytes: 2097152}}]
`, "gateway.yaml: routes[0].idempotency.max_response_bytes: 2097152 is more than server.idempotency_max_bytes (1048576) holds: no response could be kept"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantLine(t, errorLines(t, tt.yaml), tt.want)
		})
	}
}
