package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/llm"
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
	// grpcStatus, when not 0, is the gRPC status of the answer in
	// formatGRPC (a rate-limit refusal's is the route's); 0 maps the HTTP
	// status (grpcStatusFor).
	grpcStatus int
}

// appendJSON appends b as encoding/json would marshal it (the same bytes),
// without reflection: a flood of 429s is when this runs most.
func (b errorBody) appendJSON(buf []byte) []byte {
	return appendErrorJSON(buf, b.Code, b.Message, b.Policy, b.RetryAfterMs)
}

// appendErrorJSON appends the error body of those fields, as
// errorBody.appendJSON does; the message may be bytes a caller rendered.
func appendErrorJSON[S string | []byte](buf []byte, code int, msg S, policy string, retryAfterMs *int64) []byte {
	buf = append(buf, `{"code":`...)
	buf = strconv.AppendInt(buf, int64(code), 10)
	buf = append(buf, `,"message":`...)
	buf = appendJSONString(buf, msg)
	if policy != "" {
		buf = append(buf, `,"policy":`...)
		buf = appendJSONString(buf, policy)
	}
	if retryAfterMs != nil {
		buf = append(buf, `,"retry_after_ms":`...)
		buf = strconv.AppendInt(buf, *retryAfterMs, 10)
	}
	return append(buf, '}')
}

// jsonPlain marks the bytes appendJSONString copies as they are: ASCII
// but control characters, quotes, backslashes, <, > and &.
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = !strings.ContainsRune(`"\<>&`, rune(c))
	}
	return t
}()

// appendJSONString appends s as a JSON string escaped as encoding/json
// escapes it: quotes, backslashes and control characters, <, > and & (as
// \u003c...), U+2028 and U+2029, and invalid UTF-8 as U+FFFD.
func appendJSONString[S string | []byte](buf []byte, s S) []byte {
	const hex = "0123456789abcdef"
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if jsonPlain[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
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
		// At most one rune's bytes: as bytes, a conversion on the stack.
		r, size := utf8.DecodeRuneInString(string(s[i:min(len(s), i+utf8.UTFMax)]))
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
	switch errorFormatOf(r) {
	case formatGRPC:
		code := body.grpcStatus
		if code == 0 {
			code = grpcStatusFor(status)
		}
		if rec, ok := w.(*statusRecorder); ok && rec.status == 0 {
			// Metrics, the access log and the span count the answer as
			// what it stands for (a 429), not as the 200 gRPC wraps it in.
			rec.status = status
		}
		writeGRPC(w, code, body.Message)
		return
	default:
		if p := errorFormatOf(r).provider(); p != nil {
			buf = p.ErrorBody(status, llm.Refusal{Message: body.Message, Final: body.final})
			break
		}
		buf = body.appendJSON(make([]byte, 0, 160+len(body.Message)))
	}
	writeJSON(w, status, append(buf, '\n'))
}

// The values of the headers every error answer carries, shared by all of
// them: a header map holds them as they are, and Set and Add replace them
// or copy them (their capacity is their length), never write into them.
var (
	valJSON    = []string{"application/json; charset=utf-8"}[:1:1]
	valNosniff = []string{"nosniff"}[:1:1]
	valFalse   = []string{"false"}[:1:1]
)

// writeJSON answers status with the JSON body buf.
func writeJSON(w http.ResponseWriter, status int, buf []byte) {
	hdr := w.Header()
	hdr["Content-Type"] = valJSON
	hdr["X-Content-Type-Options"] = valNosniff
	// No Content-Length here: net/http sets it from the one Write of a body
	// this small, outside the header map, which then stays small enough (8
	// names with every rate-limit header) not to grow on every 429.
	w.WriteHeader(status)
	w.Write(buf)
}

// answerNoted reports whether logAnswer would note an answer of status:
// the log at its level, or the request's span.
func (h *Handler) answerNoted(ctx context.Context, status int) bool {
	return h.tracer != nil || h.log.Enabled(ctx, answerLevel(status))
}

// answerLevel is the level at which logAnswer logs an answer of status.
func answerLevel(status int) slog.Level {
	switch {
	case status == http.StatusInternalServerError:
		return slog.LevelError
	case status == http.StatusServiceUnavailable:
		// A fail-closed policy during a Redis outage answers every request
		// with 503; the limiter logs the outage itself (throttled), so one
		// line per request would only flood the log.
		return slog.LevelDebug
	case status >= 500:
		return slog.LevelWarn
	}
	return slog.LevelDebug
}

func (h *Handler) logAnswer(ctx context.Context, r *http.Request, status int, msg string, attrs ...slog.Attr) {
	if h.tracer != nil {
		noteAnswer(ctx, status, msg)
	}
	level := answerLevel(status)
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
	format := errorFormatOf(r)
	// Where clients are a provider's SDKs, a refusal no short wait fixes
	// is final: both SDKs obey x-should-retry before any hint.
	provider := format.provider() != nil
	// A gRPC client's retry policy obeys the pushback as the SDKs obey
	// x-should-retry: a refusal no short wait fixes is final there too.
	final := finalRefusal(d, provider || format == formatGRPC)
	ms := retryAfterMillis(d.RetryAfter)
	// Every header value in one buffer: the rate-limit headers, then the
	// retry hints.
	hs := newHeaderScratch(w)
	defer hs.release()
	hv := &hs.hv
	buf, _ := hv.rateLimit(hs.buf[:0], v, route.RateLimitHeaders)
	hdr := w.Header()
	switch {
	case final && provider:
		// No retry hint at all: the SDKs would sleep on it (or retry at
		// once when it is past what they accept), and no retry can pass.
		hdr[hdrShouldRetry] = valFalse
	case final:
		hdr[hdrShouldRetry] = valFalse
		buf = hv.int(buf, hdrRetryAfter, retryAfterSeconds(d.RetryAfter))
	default:
		buf = hv.int(buf, hdrRetryAfter, retryAfterSeconds(d.RetryAfter))
		if provider {
			buf = hv.int(buf, hdrRetryAfterMs, ms)
		}
	}
	hv.put(w, buf)
	if format == formatGRPC {
		// gRPC's retry pushback (A6): the wait in milliseconds, or a
		// negative one, which tells the client not to retry at all.
		pushback := "-1"
		if !final {
			pushback = strconv.FormatInt(ms, 10)
		}
		hdr[hdrGRPCPushback] = []string{pushback}
		delete(hdr, hdrShouldRetry)
		msg := deniedMessage(d)
		if final {
			msg = finalMessage(d)
		}
		h.writeError(w, r, http.StatusTooManyRequests, errorBody{
			Message: msg, Policy: d.Policy, final: final, grpcStatus: grpcLimitStatus(route),
		}, slog.String("policy", d.Policy))
		return
	}
	if format != formatGateway {
		msg := deniedMessage(d)
		if final && provider {
			msg = finalMessage(d)
		}
		retryMs := ms // on the heap, with the body; ms stays on the stack
		h.writeError(w, r, http.StatusTooManyRequests, errorBody{
			Message:      msg,
			Policy:       d.Policy,
			RetryAfterMs: &retryMs,
			final:        final,
		}, slog.String("policy", d.Policy))
		return
	}
	// The gateway's own 429, every answer of a flood: the message is
	// rendered on the stack and straight into the body, as writeError
	// would write it.
	var msgStack [192]byte
	msg := appendDeniedMessage(msgStack[:0], d)
	if h.answerNoted(r.Context(), http.StatusTooManyRequests) {
		h.logAnswer(r.Context(), r, http.StatusTooManyRequests, string(msg), slog.String("policy", d.Policy))
	}
	body := make([]byte, 0, 96+len(msg)+2*len(d.Policy))
	body = appendErrorJSON(body, http.StatusTooManyRequests*100, msg, d.Policy, &ms)
	writeJSON(w, http.StatusTooManyRequests, append(body, '\n'))
}

// hdrRetryAfterMs is Retry-After in milliseconds, which the OpenAI SDKs
// read first.
const hdrRetryAfterMs = "Retry-After-Ms"

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
	var stack [192]byte
	return string(appendDeniedMessage(stack[:0], d))
}

// appendDeniedMessage appends deniedMessage(d).
func appendDeniedMessage(b []byte, d limiter.Decision) []byte {
	switch d.Reason {
	case limiter.ReasonDenyAll:
		return fmt.Appendf(b, "policy %q denies all requests (rate 0)", d.Policy)
	case limiter.ReasonOverloaded:
		return fmt.Appendf(b, "policy %q could not be checked in time: too many requests are waiting for it; retry in %s",
			d.Policy, roundUp(d.RetryAfter))
	case limiter.ReasonCostTooHigh:
		return fmt.Appendf(b, "the request costs more than policy %q allows at once (burst %d), so it can never pass",
			d.Policy, d.Limit.Quota())
	}
	// The message of every 429 of a flood: built by hand, as the Sprintf
	// it replaces would print it ("rate limit exceeded for policy %q (%d
	// per %s, burst %d); retry in %s"), with nothing allocated.
	b = append(b, "rate limit exceeded for policy "...)
	b = appendQuote(b, d.Policy)
	b = append(b, " ("...)
	b = strconv.AppendInt(b, d.Limit.Rate, 10)
	b = append(b, " per "...)
	b = appendPer(b, d.Limit)
	b = append(b, ", burst "...)
	b = strconv.AppendInt(b, d.Limit.Quota(), 10)
	b = append(b, "); retry in "...)
	return appendWait(b, d.RetryAfter)
}

// appendQuote is strconv.AppendQuote, which for a name of plain ASCII
// (every policy's, by the config's rules) only adds the quotes: done here
// without its rune-by-rune escaping.
func appendQuote(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' || c == '"' || c == '\\' {
			return strconv.AppendQuote(b, s)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendPer appends l.Per().
func appendPer(b []byte, l limiter.Limit) []byte {
	switch p := l.Period; {
	case l.Calendar == limiter.CalendarMonth:
		return append(b, "month"...)
	case p > 0 && p%time.Hour == 0:
		return append(strconv.AppendInt(b, int64(p/time.Hour), 10), 'h')
	case p > 0 && p%time.Minute == 0:
		return append(strconv.AppendInt(b, int64(p/time.Minute), 10), 'm')
	}
	return append(b, l.Per()...)
}

// appendWait appends roundUp(d).String(): whole milliseconds below a
// second, whole seconds (with hours and minutes as time.Duration shows
// them) from one.
func appendWait(b []byte, d time.Duration) []byte {
	d = roundUp(d)
	if d < time.Second {
		return append(strconv.AppendInt(b, int64(d/time.Millisecond), 10), "ms"...)
	}
	s := int64(d / time.Second)
	if s >= 3600 {
		b = append(strconv.AppendInt(b, s/3600, 10), 'h')
		s %= 3600
		b = append(strconv.AppendInt(b, s/60, 10), 'm')
		s %= 60
	} else if s >= 60 {
		b = append(strconv.AppendInt(b, s/60, 10), 'm')
		s %= 60
	}
	return append(strconv.AppendInt(b, s, 10), 's')
}

// roundUp shows a wait as people read it: whole seconds when at least one,
// milliseconds below.
func roundUp(d time.Duration) time.Duration {
	if d >= time.Second {
		return time.Duration(ceilSeconds(d)) * time.Second
	}
	return time.Duration(retryAfterMillis(d)) * time.Millisecond
}
