package llmload

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

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

// Japanese is valid UTF-8 of at most the asked length (less by at most a
// character's bytes), the same every call, without spaces, and punctuated.
func TestJapanese(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 1000, 1 << 20} {
		a, b := Japanese(n), Japanese(n)
		if len(a) > n || len(a) < n-3 || a != b || !utf8.ValidString(a) {
			t.Fatalf("Japanese(%d): length %d, same twice %v, valid %v", n, len(a), a == b, utf8.ValidString(a))
		}
	}
	text := Japanese(1 << 16)
	if strings.ContainsAny(text, " \t\n") || strings.Count(text, "、")+strings.Count(text, "。") < 1000 {
		t.Errorf("Japanese(64 KiB): spaces %v, %d punctuation marks", strings.ContainsAny(text, " \t\n"), strings.Count(text, "、")+strings.Count(text, "。"))
	}
}

// Config is a config the gateway takes.
func TestConfigParses(t *testing.T) {
	src := strings.Replace(strings.Replace(Config, "%s", "127.0.0.1:0", 1), "%s", "http://127.0.0.1:9", 1)
	if _, err := policies.Parse("llmload.yaml", []byte(src), policies.Options{}); err != nil {
		t.Fatalf("Config does not parse: %v", err)
	}
}

// SmallCall sends SmallBody as tenant Key's JSON call, and an answer other
// than 200 is an error.
func TestSmallCall(t *testing.T) {
	var status atomic.Int32 // set between calls, read by the handler
	status.Store(http.StatusOK)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.Header.Get("Authorization") != "Bearer "+Key ||
			r.Header.Get("Content-Type") != "application/json" || string(body) != SmallBody {
			http.Error(w, "unexpected request", http.StatusBadRequest)
			return
		}
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	if d, err := SmallCall(context.Background(), srv.Client(), srv.URL); err != nil || d <= 0 {
		t.Fatalf("SmallCall: %s, %v; want a duration and no error", d, err)
	}
	status.Store(http.StatusTooManyRequests)
	if _, err := SmallCall(context.Background(), srv.Client(), srv.URL); err == nil || !strings.Contains(err.Error(), "429") {
		t.Fatalf("SmallCall against a 429: got %v, want an error naming 429", err)
	}
}
