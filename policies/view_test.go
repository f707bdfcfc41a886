package policies

import (
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestCredentialFieldsAreRedacted: every setting named like a credential or
// an address that can carry one is marked with a redact rule, so Redacted
// never shows it; a secret added later without a mark fails here.
func TestCredentialFieldsAreRedacted(t *testing.T) {
	credential := regexp.MustCompile(`password|token|secret|username|api_key|^keys$|^headers$|^addrs$|upstream$|endpoint`)
	seen := map[reflect.Type]bool{}
	var walk func(place string, typ reflect.Type)
	walk = func(place string, typ reflect.Type) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || typ == durationType || seen[typ] {
			return
		}
		seen[typ] = true
		for i := range typ.NumField() {
			f := typ.Field(i)
			key := f.Tag.Get("koanf")
			if key == "" {
				continue
			}
			// A credential is text: a key of a token bucket or a header
			// name in a list is not.
			if credential.MatchString(key) && f.Tag.Get("redact") == "" && !isTokenCount(f.Type) {
				t.Errorf("%s: named like a credential but has no redact rule", keyPlace(place, key))
			}
			walk(keyPlace(place, key), f.Type)
		}
	}
	walk("", reflect.TypeFor[Config]())
}

func isTokenCount(t reflect.Type) bool {
	return t.Kind() != reflect.String && t.Kind() != reflect.Slice && t.Kind() != reflect.Map
}

func TestRedacted(t *testing.T) {
	// Validation refuses some of these; Redacted must hide them anyway.
	cfg := Config{
		Admin: AdminConfig{Token: "SECRET-admin"},
		Redis: RedisConfig{
			Addrs:    []string{"redis://ops:SECRET-pw@10.0.0.7:6379/0?password=SECRET-q", "user:SECRET-x@10.0.0.8:6379"},
			Password: "SECRET-redis",
		},
		Tracing: TracingConfig{Endpoint: "https://u:SECRET-otlp@collector.example:4318/v1/traces?k=SECRET-k"},
		Tenants: TenantsConfig{Keys: map[string]TenantConfig{"SECRET-key": {Tenant: "acme", Plan: "free"}}},
		Routes: []RouteConfig{{
			Name:           "chat",
			Match:          MatchConfig{Headers: map[string]string{"X-Internal": "SECRET-header", "X-Debug": "*", "X-Env": ""}},
			Upstream:       "https://u:SECRET-up@api.example.com/v1?key=SECRET-uq#SECRET-frag",
			UpstreamAPIKey: "SECRET-upstream-key",
			Policies:       []string{"per-ip"},
		}},
		Policies: map[string]PolicyConfig{"per-ip": {Key: "ip", Rate: new(int64(10)), Per: time.Minute}},
	}
	cfg.ApplyDefaults()
	raw, err := json.Marshal(Redacted(&cfg))
	if err != nil {
		t.Fatal(err)
	}
	got := string(raw)
	if i := strings.Index(got, "SECRET"); i >= 0 {
		t.Fatalf("Redacted shows a secret: …%s…", got[max(0, i-60):min(len(got), i+30)])
	}
	for _, want := range []string{
		`"addrs":["redis://10.0.0.7:6379/0","10.0.0.8:6379"]`,
		`"password_set":true`, `"username_set":false`, `"tls":false`,
		`"upstream":"https://api.example.com/v1"`, `"upstream_api_key_set":true`,
		`"endpoint":"https://collector.example:4318/v1/traces"`,
		`"token_set":true`, `"per":"1m"`, `"timeout":"30s"`,
		`"headers":{"X-Debug":"*","X-Env":"","X-Internal":"REDACTED"}`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Redacted: got\n%s\nwant it to contain %s", got, want)
		}
	}
	if strings.Contains(got, `"sentinel"`) {
		t.Errorf("Redacted: got a sentinel section for a config without one:\n%s", got)
	}
}

// RouteConfig finds the entry a compiled route came from, which the views
// show; a route the snapshot was not compiled with has none.
func TestRouteConfig(t *testing.T) {
	snap := mustParse(t, `
routes:
  - {name: a, match: {path_prefix: /a/}, upstream: builtin:echo}
  - {name: b, upstream: builtin:echo, strip_prefix: /b}
`)
	for i, want := range []string{"a", "b"} {
		if rc, ok := snap.RouteConfig(snap.Routes[i]); !ok || rc.Name != want {
			t.Errorf("route %d: got %q, %v; want %s", i, rc.Name, ok, want)
		}
	}
	if rc, _ := snap.RouteConfig(snap.Routes[1]); rc.StripPrefix != "/b" || rc.Timeout != DefaultRouteTimeout {
		t.Errorf("route b: got %+v, want its strip_prefix and the default timeout", rc)
	}
	if _, ok := snap.RouteConfig(&Route{Name: "a"}); ok {
		t.Error("a route built by hand: got a config entry, want none")
	}
	if _, ok := (&Snapshot{Routes: snap.Routes}).RouteConfig(snap.Routes[0]); ok {
		t.Error("a snapshot without a config: got a config entry, want none")
	}
}
