package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
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
	// final marks a 429 that no wait a client can use would fix (see
	// finalRefusal), which OpenAI's shape calls insufficient_quota.
	final bool
}

// appendJSON appends b as encoding/json would marshal it (the same bytes),
// without reflection: a flood of 429s is when this runs most.
func (b errorBody) appendJSON(buf []byte) []byte {
	buf = append(buf, `{"code":`...)
	buf = strconv.AppendInt(buf, int64(b.Code), 10)
	buf = append(buf, `,"message":`...)
	buf = appendJSONString(buf, b.Message)
	if b.Policy != "" {
		buf = append(buf, `,"policy":`...)
		buf = appendJSONString(buf, b.Policy)
	}
	if b.RetryAfterMs != nil {
		buf = append(buf, `,"retry_after_ms":`...)
		buf = strconv.AppendInt(buf, *b.RetryAfterMs, 10)
	}
	return append(buf, '}')
}

// appendJSONString appends s as a JSON string escaped as encoding/json
// escapes it: quotes, backslashes and control characters, <, > and & (as
// \u003c...), U+2028 and U+2029, and invalid UTF-8 as U+FFFD.
func appendJSONString(buf []byte, s string) []byte {
	const hex = "0123456789abcdef"
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			buf = append(buf, s[start:i]...)
			switch c {
			case '"', '\\':
				buf = append(buf, '\\', c)
			case '\n':
				buf = append(buf, '\\', 'n')
			case '\r':
				buf = append(buf, '\\', 'r')
			case '\t':
				buf = append(buf, '\\', 't')
			default:
				buf = append(buf, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			buf = append(buf, s[start:i]...)
			buf = append(buf, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			buf = append(buf, s[start:i]...)
			buf = append(buf, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}

// writeError answers with status and a JSON body, and logs the answer: 4xx at
// debug (they are the gateway doing its job), 5xx at warn, 500 at error.
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, status int, body errorBody, attrs ...slog.Attr) {
	body.Code = status * 100
	h.logAnswer(r.Context(), r, status, body.Message, attrs...)

	var buf []byte
	if anthropicErrors(r) {
		var err error
		if buf, err = anthropicErrorJSON(status, body); err != nil {
			w.WriteHeader(status) // cannot happen for this struct; answer without a body
			return
		}
	} else if openAIErrors(r) {
		var err error
		if buf, err = json.Marshal(newOpenAIError(status, body)); err != nil {
			w.WriteHeader(status) // cannot happen for this struct; answer without a body
			return
		}
	} else {
		buf = body.appendJSON(make([]byte, 0, 160+len(body.Message)))
	}
	buf = append(buf, '\n')
	hdr := w.Header()
	hdr["Content-Type"] = []string{"application/json; charset=utf-8"}
	hdr["X-Content-Type-Options"] = []string{"nosniff"}
	// No Content-Length here: net/http sets it from the one Write of a body
	// this small, outside the header map, which then stays small enough (8
	// names with every rate-limit header) not to grow on every 429.
	w.WriteHeader(status)
	w.Write(buf)
}

func (h *Handler) logAnswer(ctx context.Context, r *http.Request, status int, msg string, attrs ...slog.Attr) {
	if h.tracer != nil {
		noteAnswer(ctx, status, msg)
	}
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
func (h *Handler) writeRateLimited(w http.ResponseWriter, r *http.Request, route *policies.Route, v limiter.Verdict, d limiter.Decision) {
	hdr := w.Header()
	setRateLimitHeaders(hdr, v, route.RateLimitHeaders)
	ms := retryAfterMillis(d.RetryAfter)
	provider := openAIErrors(r)
	final := finalRefusal(d, provider)
	msg := deniedMessage(d)
	switch {
	case final && provider:
		// No retry hint at all: the SDKs would sleep on it (or retry at
		// once when it is past what they accept), and no retry can pass.
		hdr[hdrShouldRetry] = []string{"false"}
		msg = finalMessage(d)
	case final:
		hdr[hdrShouldRetry] = []string{"false"}
		hdr[hdrRetryAfter] = []string{strconv.FormatInt(retryAfterSeconds(d.RetryAfter), 10)}
	default:
		hdr[hdrRetryAfter] = []string{strconv.FormatInt(retryAfterSeconds(d.RetryAfter), 10)}
		if provider {
			hdr["Retry-After-Ms"] = []string{strconv.FormatInt(ms, 10)}
		}
	}
	h.writeError(w, r, http.StatusTooManyRequests, errorBody{
		Message:      msg,
		Policy:       d.Policy,
		RetryAfterMs: &ms,
		final:        final,
	}, slog.String("policy", d.Policy))
}

// hdrShouldRetry is the header the OpenAI and Anthropic SDKs read before
// anything else to decide whether to retry.
const hdrShouldRetry = "X-Should-Retry"

// maxRetryHint is the longest wait a client SDK acts on: the openai and AI
// SDKs ignore longer retry hints, and a longer sleep holds a caller's
// request (and a worker) for nothing it could not get by asking later.
const maxRetryHint = 60 * time.Second

// finalRefusal reports whether a 429 for d is one that no wait a client
// can use would fix: a cost above the limit's quota or a rate of zero
// (never), and, where clients are SDKs (provider errors), a limit reached
// on a budget of a day or more, or with a wait past maxRetryHint. On other routes only the
// first two are final: there the true Retry-After is what clients read.
func finalRefusal(d limiter.Decision, provider bool) bool {
	switch {
	case d.Reason == limiter.ReasonCostTooHigh || d.Reason == limiter.ReasonDenyAll:
		return true
	case !provider || (d.Reason != limiter.ReasonLimited && d.Reason != limiter.ReasonDenialCached):
		return false // an overloaded check is worth retrying at once
	}
	return d.Limit.Period >= budgetPeriod || d.RetryAfter > maxRetryHint
}

// finalMessage says why a final refusal cannot pass by retrying, and when
// the quota has room again.
func finalMessage(d limiter.Decision) string {
	switch d.Reason {
	case limiter.ReasonDenyAll, limiter.ReasonCostTooHigh:
		return deniedMessage(d) + "; retrying cannot help"
	}
	return fmt.Sprintf("the quota of policy %q (%d per %s) is spent: it has room for this request again in %s; a retry before then cannot pass",
		d.Policy, d.Limit.Quota(), d.Limit.Per(), roundUp(d.RetryAfter))
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
		// The message of every 429 of a flood: built by hand, as the
		// Sprintf it replaces would print it.
		b := make([]byte, 0, 96+len(d.Policy))
		b = append(b, "rate limit exceeded for policy "...)
		b = strconv.AppendQuote(b, d.Policy)
		b = append(b, " ("...)
		b = strconv.AppendInt(b, d.Limit.Rate, 10)
		b = append(b, " per "...)
		b = append(b, d.Limit.Per()...)
		b = append(b, ", burst "...)
		b = strconv.AppendInt(b, d.Limit.Quota(), 10)
		b = append(b, "); retry in "...)
		b = append(b, roundUp(d.RetryAfter).String()...)
		return string(b)
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
