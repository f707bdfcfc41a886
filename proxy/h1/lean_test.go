package h1

import (
	"bytes"
	"io"
	"net/http"
	"testing"
)

// The lean path carries what it can write whole before reading the answer;
// anything an upstream could leave unread (a large body, one of unknown
// length, a stream) goes to the fallback, which reads while it writes.
func TestLean(t *testing.T) {
	// held is a body in memory (GetBody) of n bytes, announced as n (-1:
	// unknown, sent chunked).
	held := func(n int64) *http.Request {
		b := bytes.Repeat([]byte("x"), int(max(n, 100)))
		r, _ := http.NewRequest(http.MethodPost, "http://upstream/pay", bytes.NewReader(b))
		r.ContentLength = n
		return r
	}
	streamed := func() *http.Request {
		r := held(10)
		r.GetBody = nil
		r.Body = io.NopCloser(bytes.NewReader([]byte("0123456789")))
		return r
	}
	get, _ := http.NewRequest(http.MethodGet, "http://upstream/", nil)
	tls, _ := http.NewRequest(http.MethodGet, "https://upstream/", nil)
	tests := []struct {
		name string
		req  *http.Request
		want bool
	}{
		{"GET", get, true},
		{"https", tls, false},
		{"small held body", held(1024), true},
		{"held body at the bound", held(MaxLeanBody), true},
		{"held body past the bound", held(MaxLeanBody + 1), false},
		{"10 MB held body", held(10_000_000), false},
		{"held body of unknown length", held(-1), false},
		{"streamed body", streamed(), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Lean(tc.req); got != tc.want {
				t.Fatalf("Lean: got %v, want %v", got, tc.want)
			}
		})
	}
}
