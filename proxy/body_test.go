package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// readAllBounded reads what io.ReadAll through http.MaxBytesReader reads,
// with the same error, whatever length the request declares: its own, less
// or more than the body holds, none, past the limit.
func TestReadAllBoundedIsReadAll(t *testing.T) {
	const limit = 16
	for _, tc := range []struct {
		body     string
		declared int64
	}{
		{"hello", 5}, {"hello", 3}, {"hello", 9}, {"hello", -1}, {"hello", 0}, {"", 0},
		{strings.Repeat("x", limit), limit}, {strings.Repeat("x", limit+1), limit}, {strings.Repeat("x", limit+1), 4},
		{strings.Repeat("x", limit+1), limit + 1}, {strings.Repeat("x", 40), 20},
	} {
		read := func(f func(http.ResponseWriter, *http.Request) ([]byte, error)) ([]byte, error) {
			r := httptest.NewRequest(http.MethodPost, "/", io.NopCloser(strings.NewReader(tc.body)))
			r.ContentLength = tc.declared
			return f(httptest.NewRecorder(), r)
		}
		want, wantErr := read(func(w http.ResponseWriter, r *http.Request) ([]byte, error) {
			return io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
		})
		got, err := read(func(w http.ResponseWriter, r *http.Request) ([]byte, error) { return readAllBounded(w, r, limit) })
		var wantTooLarge, tooLarge *http.MaxBytesError
		if (wantErr == nil) != (err == nil) || errors.As(wantErr, &wantTooLarge) != errors.As(err, &tooLarge) ||
			(tooLarge != nil && tooLarge.Limit != wantTooLarge.Limit) || (err == nil && !bytes.Equal(got, want)) {
			t.Errorf("%d bytes declared %d: got %q, %v; want %q, %v", len(tc.body), tc.declared, got, err, want, wantErr)
		}
	}
}
