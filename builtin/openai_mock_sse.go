package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// sseWriter writes one server-sent event at a time and flushes it, so that
// each reaches the client as soon as it is written. Once the request's
// context ends (the client hung up) every write fails and the stream stops.
type sseWriter struct {
	ctx      context.Context
	w        http.ResponseWriter
	flush    *http.ResponseController
	interval time.Duration
	sleep    func(context.Context, time.Duration) error
}

var errStreamEnded = errors.New("stream ended: client gone")

// startStream waits the first byte's latency, then sends the SSE headers.
// It reports false when the client left first.
func (m *openAIMock) startStream(w http.ResponseWriter, r *http.Request) (*sseWriter, bool) {
	if d := m.cfg.FirstByteLatency; d > 0 {
		if m.cfg.Sleep(r.Context(), d) != nil {
			return nil, false
		}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &sseWriter{ctx: r.Context(), w: w, flush: http.NewResponseController(w),
		interval: m.tokenInterval(), sleep: m.cfg.Sleep}, true
}

// data sends v as a "data:" event.
func (s *sseWriter) data(v any) error { return s.event("", v) }

// event sends v as an event, with an "event:" line when name is set (the
// Responses API names its events).
func (s *sseWriter) event(name string, v any) error {
	out, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding event: %w", err)
	}
	var frame []byte
	if name != "" {
		frame = append(frame, "event: "+name+"\n"...)
	}
	frame = append(append(append(frame, "data: "...), out...), "\n\n"...)
	return s.write(frame)
}

// done sends the chat stream's terminator.
func (s *sseWriter) done() { _ = s.write([]byte("data: [DONE]\n\n")) }

func (s *sseWriter) write(frame []byte) error {
	if s.ctx.Err() != nil {
		return errStreamEnded
	}
	if _, err := s.w.Write(frame); err != nil {
		return err
	}
	return s.flush.Flush()
}

// think waits while the model reasons, n tokens at the configured pace,
// before the first visible token.
func (s *sseWriter) think(n int) error {
	if s.interval <= 0 || n <= 0 {
		return s.ctx.Err()
	}
	return s.sleep(s.ctx, time.Duration(n)*s.interval)
}

// pause waits between two tokens at the configured pace.
func (s *sseWriter) pause() error {
	if s.interval <= 0 {
		return s.ctx.Err()
	}
	return s.sleep(s.ctx, s.interval)
}
