package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// statusClientClosed is what the gateway records when the client went away
// before the upstream answered (nginx's 499). Nobody reads the response; the
// status exists for logs.
const statusClientClosed = 499

// errorBody is every error the gateway answers itself. Code is the HTTP status
// times 100, so clients can branch on a number that stays stable if messages
// change.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	// Policy names the policy that decided (429, 401, 503).
	Policy string `json:"policy,omitempty"`
	// RetryAfterMs is set on 429 only; a pointer so that it is present there
	// even if it were zero.
	RetryAfterMs *int64 `json:"retry_after_ms,omitempty"`
	// budget marks a 429 of a spent budget (a window of a day or more),
	// which OpenAI's shape calls insufficient_quota.
	budget bool
}

// writeError answers with status and a JSON body, and logs the answer: 4xx at
// debug (they are the gateway doing its job), 5xx at warn, 500 at error.
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, status int, body errorBody, attrs ...slog.Attr) {
	body.Code = status * 100
	h.logAnswer(r.Context(), r, status, body.Message, attrs...)

	var buf []byte
	var err error
	if openAIErrors(r) {
		buf, err = json.Marshal(newOpenAIError(status, body))
	} else {
		buf, err = json.Marshal(body)
	}
	if err != nil { // cannot happen for this struct; answer without a body
		w.WriteHeader(status)
		return
	}
	buf = append(buf, '\n')
	hdr := w.Header()
	hdr["Content-Type"] = []string{"application/json; charset=utf-8"}
	hdr["X-Content-Type-Options"] = []string{"nosniff"}
	hdr["Content-Length"] = []string{strconv.Itoa(len(buf))}
	w.WriteHeader(status)
	w.Write(buf)
}

func (h *Handler) logAnswer(ctx context.Context, r *http.Request, status int, msg string, attrs ...slog.Attr) {
	level := slog.LevelDebug
	switch {
	case status == http.StatusInternalServerError:
		level = slog.LevelError
	case status == http.StatusServiceUnavailable:
		// A fail-closed policy during a Redis outage answers every request
		// with 503; the limiter logs the outage itself (throttled), so one
		// line per request would only flood the log.
	case status >= 500:
		level = slog.LevelWarn
	}
	if !h.log.Enabled(ctx, level) {
		return
	}
	attrs = append(attrs,
		slog.Int("status", status),
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.String("remote", r.RemoteAddr),
	)
	h.log.LogAttrs(ctx, level, msg, attrs...)
}

// writeRateLimited answers 429 for the verdict's denying decision d.
func (h *Handler) writeRateLimited(w http.ResponseWriter, r *http.Request, v limiter.Verdict, d limiter.Decision) {
	setRateLimitHeaders(w.Header(), v)
	w.Header()[hdrRetryAfter] = []string{strconv.FormatInt(retryAfterSeconds(d.RetryAfter), 10)}
	ms := retryAfterMillis(d.RetryAfter)
	if openAIErrors(r) {
		w.Header().Set("retry-after-ms", strconv.FormatInt(ms, 10))
	}
	h.writeError(w, r, http.StatusTooManyRequests, errorBody{
		Message:      deniedMessage(d),
		Policy:       d.Policy,
		RetryAfterMs: &ms,
		budget:       d.Limit.Period >= budgetPeriod,
	}, slog.String("policy", d.Policy))
}

// deniedMessage says in plain words why d denied.
func deniedMessage(d limiter.Decision) string {
	switch d.Reason {
	case limiter.ReasonDenyAll:
		return fmt.Sprintf("policy %q denies all requests (rate 0)", d.Policy)
	case limiter.ReasonOverloaded:
		return fmt.Sprintf("policy %q could not be checked in time: too many requests are waiting for it; retry in %s",
			d.Policy, roundUp(d.RetryAfter))
	case limiter.ReasonCostTooHigh:
		return fmt.Sprintf("the request costs more than policy %q allows at once (burst %d), so it can never pass",
			d.Policy, d.Limit.Quota())
	default:
		return fmt.Sprintf("rate limit exceeded for policy %q (%d per %s, burst %d); retry in %s",
			d.Policy, d.Limit.Rate, d.Limit.Per(), d.Limit.Quota(), roundUp(d.RetryAfter))
	}
}

// roundUp shows a wait as people read it: whole seconds when at least one,
// milliseconds below.
func roundUp(d time.Duration) time.Duration {
	if d >= time.Second {
		return time.Duration(ceilSeconds(d)) * time.Second
	}
	return time.Duration(retryAfterMillis(d)) * time.Millisecond
}
