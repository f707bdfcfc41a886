package llmload

import (
	"strings"
	"testing"

	"github.com/ratelimit-gateway/gateway/policies"
)

// Text is the asked length, the same every call, and words.
func TestText(t *testing.T) {
	for _, n := range []int{0, 1, 1000, 1 << 20} {
		a, b := Text(n), Text(n)
		if len(a) != n || a != b {
			t.Fatalf("Text(%d): length %d, same twice %v", n, len(a), a == b)
		}
	}
	if got := len(strings.Fields(Text(4096))); got < 400 {
		t.Errorf("Text(4096) has %d words, want prose", got)
	}
}

// Config is a config the gateway takes.
func TestConfigParses(t *testing.T) {
	src := strings.Replace(strings.Replace(Config, "%s", "127.0.0.1:0", 1), "%s", "http://127.0.0.1:9", 1)
	if _, err := policies.Parse("llmload.yaml", []byte(src), policies.Options{}); err != nil {
		t.Fatalf("Config does not parse: %v", err)
	}
}
