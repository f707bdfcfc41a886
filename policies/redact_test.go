package policies

import (
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"http://user:pw@host", "http://REDACTED@host"},
		{"http://user:pw@host:8080/v1?token=s3cret&x=1", "http://REDACTED@host:8080/v1?token=REDACTED&x=REDACTED"},
		{"https://tok3n@api.example/x", "https://REDACTED@api.example/x"},
		{"http://a:b@c@host/p", "http://REDACTED@host/p"},
		{"http://host/p?s3cret", "http://host/p?REDACTED"},
		{"http://host/p?a=1;b=2#frag", "http://host/p?a=REDACTED&b=REDACTED#REDACTED"},
		{"http://host/a@b", "http://host/a@b"},
		{"http://user:pw@host:bad port/x", "http://REDACTED@host:bad port/x"},
		{"user:pw@host", "REDACTED@host"},
		{"redis://default:pw@127.0.0.1:6379/0", "redis://REDACTED@127.0.0.1:6379/0"},
		{"http://127.0.0.1:9000", "http://127.0.0.1:9000"},
		{"http://host/p?", "http://host/p?"},
		{"", ""},
	} {
		if got := RedactURL(tt.in); got != tt.want {
			t.Errorf("RedactURL(%q): got %q, want %q", tt.in, got, tt.want)
		}
	}
}

// A rejected upstream or Redis address is echoed in the error (the start
// error, POST /admin/reload's 422, gateway check) without its user info or
// query values.
func TestRejectedURLsAreRedacted(t *testing.T) {
	for _, tt := range []struct {
		name, yaml, place string
	}{
		{"user info", `routes: [{name: r, upstream: "http://user:pw-s3cret@up.example"}]`, "routes[0].upstream"},
		{"query token", `routes: [{name: r, upstream: "http://up.example/v1?token=tok-s3cret"}]`, "routes[0].upstream"},
		{"malformed with user info", `routes: [{name: r, upstream: "http://user:pw-s3cret@up.example:port/x"}]`, "routes[0].upstream"},
		{"fragment", `routes: [{name: r, upstream: "http://up.example/#tok-s3cret"}]`, "routes[0].upstream"},
		{"redis address", `{redis: {addrs: ["tcp://user:pw-s3cret@127.0.0.1:6379"]}, routes: [{name: r, upstream: "http://up.example"}]}`, "redis.addrs[0]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse(t, tt.yaml)
			if err == nil {
				t.Fatal("parsed; want an error")
			}
			msg := err.Error()
			if strings.Contains(msg, "s3cret") || !strings.Contains(msg, "gateway.yaml: "+tt.place) || !strings.Contains(msg, "REDACTED") {
				t.Errorf("error: got %q, want it to name %s and show the URL redacted", msg, tt.place)
			}
		})
	}
}
