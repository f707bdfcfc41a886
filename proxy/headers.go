package proxy

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/httpfield"
	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/llm"
	"github.com/ratelimit-gateway/gateway/policies"
)

// Response header names the gateway owns. On proxied responses the gateway's
// values replace any the upstream sent under the same names.
const (
	hdrPolicy     = "Ratelimit-Policy" // canonical form of RateLimit-Policy
	hdrRateLimit  = "Ratelimit"        // canonical form of RateLimit
	hdrXLimit     = "X-Ratelimit-Limit"
	hdrXRemaining = "X-Ratelimit-Remaining"
	hdrXReset     = "X-Ratelimit-Reset"
	hdrRetryAfter = "Retry-After"
)

// setRateLimitHeaders renders v into h as the route's set asks, replacing
// what h held under those names. It writes nothing for a verdict without
// rendered decisions (no policy applied), so an upstream's own headers then
// pass through, nor under names the set leaves out.
//
// RateLimit-Policy and RateLimit follow the IETF httpapi draft: one item per
// decided policy, `"name";q=<quota>;w=<window s>` and
// `"name";r=<remaining>;t=<s until reset>`. X-RateLimit-* describe the
// deciding (denying or most restrictive) decision.
//
// It reports whether it wrote any.
func setRateLimitHeaders(h http.Header, v limiter.Verdict, set policies.RateLimitHeaders) bool {
	var stack [headerStack]byte
	var hv headerValues
	buf, ok := hv.rateLimit(stack[:0], v, set)
	if !ok {
		return false
	}
	hv.setOn(h, buf)
	return true
}

// headerStack is the stack buffer of a response's header values: enough
// for every rate-limit header of 8 policies with names of 10 characters
// (about 2×name+40 bytes each, and 30 for X-RateLimit-*), so that such a
// route's headers do not spill to the heap.
const headerStack = 512

// maxHeaderValues is how many headers one headerValues renders: the five
// rate-limit headers, and Retry-After and Retry-After-Ms on a 429 or
// OpenAI's three sets of three on an llm call's response.
const maxHeaderValues = 14

// headerValues cuts a response's header values from one buffer, into which
// they were rendered one after the other (the buffer is passed along, not
// held, so that it can live on the caller's stack). A server that offers
// SetFields (fieldSetter) takes them as they are, copied into its
// connection's buffers: no allocation; on net/http's header map they go as
// one string and one array of values, two allocations however many headers.
type headerValues struct {
	names [maxHeaderValues]string
	ends  [maxHeaderValues]int
	n     int
}

// headerScratch is a response's header values and the buffer they are
// rendered into, for a response that goes to a fieldSetter: handed through
// that interface, values on the stack would escape (two allocations a
// response, 860 bytes). The request's statusRecorder, pooled already,
// holds one; without it one comes from a pool of its own.
type headerScratch struct {
	hv     headerValues
	buf    [headerStack]byte
	pooled bool
}

var headerScratches = sync.Pool{New: func() any { return &headerScratch{pooled: true} }}

// newHeaderScratch is a scratch for the answer on w, empty.
func newHeaderScratch(w http.ResponseWriter) *headerScratch {
	var hs *headerScratch
	if rec, ok := w.(*statusRecorder); ok {
		hs = &rec.headers
	} else {
		hs = headerScratches.Get().(*headerScratch)
	}
	hs.hv.n = 0
	return hs
}

// release gives hs back; nothing it holds may be used after.
func (hs *headerScratch) release() {
	if hs.pooled {
		headerScratches.Put(hs)
	}
}

// end closes the value rendered into buf since the last one as name's.
func (hv *headerValues) end(buf []byte, name string) {
	hv.names[hv.n], hv.ends[hv.n] = name, len(buf)
	hv.n++
}

// int renders n as name's value.
func (hv *headerValues) int(buf []byte, name string, n int64) []byte {
	buf = strconv.AppendInt(buf, n, 10)
	hv.end(buf, name)
	return buf
}

// setOn sets the values rendered in buf on h, replacing what h held under
// their names.
func (hv *headerValues) setOn(h http.Header, buf []byte) {
	if hv.n == 0 {
		return
	}
	all := string(buf)
	vals := make([]string, hv.n)
	start := 0
	for i := range hv.n {
		vals[i] = all[start:hv.ends[i]]
		start = hv.ends[i]
		h[hv.names[i]] = vals[i : i+1 : i+1]
	}
}

// fieldSetter is a response that takes header fields apart from its header
// map (the gateway's lean server's does): each name i is set to
// values[ends[i-1]:ends[i]] as w.Header()[name] = []string{value} would,
// without the map's inserts and allocations. It reports false, having set
// nothing, where the map has to take them.
type fieldSetter interface {
	SetFields(names []string, ends []int, values []byte) bool
}

// put sets the values rendered in buf on w's response: apart from its
// header map where w is, or wraps, a fieldSetter, else on the map.
func (hv *headerValues) put(w http.ResponseWriter, buf []byte) {
	if hv.n == 0 {
		return
	}
	u := w
	if rec, ok := u.(*statusRecorder); ok { // the handler's own wrapper, nearly always
		u = rec.ResponseWriter
	}
	for {
		if fs, ok := u.(fieldSetter); ok {
			if fs.SetFields(hv.names[:hv.n], hv.ends[:hv.n], buf) {
				return
			}
			break
		}
		uw, ok := u.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			break
		}
		u = uw.Unwrap()
	}
	hv.setOn(w.Header(), buf)
}

// putAnswerHeaders renders the rate-limit headers of an upstream's answer
// to a request v let through into a scratch of its own, with an OpenAI
// route's sets, and puts them on w (Anthropic's, and an idempotent
// request's OpenAI sets, go on the answer's own header, src, where
// replay_headers may keep them). The caller releases the scratch once done
// with its names (moveFields drops them from src).
func putAnswerHeaders(w http.ResponseWriter, src http.Header, route *policies.Route, v limiter.Verdict, costs []policies.Cost, stored bool) *headerScratch {
	hs := newHeaderScratch(w)
	hv := &hs.hv
	buf, _ := hv.rateLimit(hs.buf[:0], v, route.RateLimitHeaders)
	if route.Provider != nil {
		switch {
		case route.Provider.Headers() == llm.HeadersAnthropic:
			setAnthropicHeaders(src, v, costs, nil, time.Now())
		case stored:
			setOpenAIHeadersWith(src, v, costs, nil)
		default:
			buf = hv.openAI(buf, v, costs, nil)
		}
	}
	hv.put(w, buf)
	return hs
}

// moveFields moves src's fields onto dst as ReverseProxy's copyHeader would
// copy them next (after dst's own values), but for Content-Type, which
// ReverseProxy reads after to flush an event stream as it comes. copyHeader
// adds each value with Header.Add, which canonicalizes the name again, at
// about 30 instructions a byte; a transport's names are canonical already,
// which a table confirms at a few a byte (a name that is not is left to
// copyHeader). Date and the names drop holds are dropped from src, in the
// same pass, and go nowhere.
func moveFields(dst, src http.Header, drop *headerValues) {
	for k, vv := range src {
		if k == "Date" || drop.has(k) {
			delete(src, k)
			continue
		}
		if k == "Content-Type" || len(vv) == 0 || !httpfield.CanonicalName(k) {
			continue
		}
		if have, ok := dst[k]; ok {
			dst[k] = append(have, vv...)
		} else {
			dst[k] = vv
		}
		delete(src, k)
	}
}

// has reports whether name is one of those rendered.
func (hv *headerValues) has(name string) bool {
	for _, n := range hv.names[:hv.n] {
		if n == name {
			return true
		}
	}
	return false
}

// dropFrom removes from h the names rendered, so that an upstream's values
// under them do not join the gateway's.
func (hv *headerValues) dropFrom(h http.Header) {
	for _, name := range hv.names[:hv.n] {
		delete(h, name)
	}
}

// rateLimit renders v's rate-limit headers into buf as set asks (see
// setRateLimitHeaders), and reports whether there are any.
func (hv *headerValues) rateLimit(buf []byte, v limiter.Verdict, set policies.RateLimitHeaders) ([]byte, bool) {
	if set == policies.RateLimitHeadersNone || !anyRendered(v) {
		return buf, false
	}
	if set.IETF() {
		// RateLimit, then RateLimit-Policy: every name in sorted order,
		// as SetFields keeps them without moving one.
		for _, pass := range [2]int{1, 0} {
			n := 0
			for i := range v.Decisions {
				d := &v.Decisions[i]
				if !rendered(d) {
					continue
				}
				if n > 0 {
					buf = append(buf, ", "...)
				}
				n++
				buf = appendSFString(buf, d.Policy)
				if pass == 0 {
					buf = append(buf, ";q="...)
					buf = strconv.AppendInt(buf, d.Limit.Quota(), 10)
					buf = append(buf, ";w="...)
					buf = strconv.AppendInt(buf, ceilSeconds(d.Limit.Period), 10)
				} else {
					r, t := remainingAndReset(d)
					buf = append(buf, ";r="...)
					buf = strconv.AppendInt(buf, r, 10)
					buf = append(buf, ";t="...)
					buf = strconv.AppendInt(buf, t, 10)
				}
			}
			if pass == 0 {
				hv.end(buf, hdrPolicy)
			} else {
				hv.end(buf, hdrRateLimit)
			}
		}
	}
	if set.Legacy() {
		d, _ := v.Deciding()
		r, t := remainingAndReset(&d)
		buf = hv.int(buf, hdrXLimit, d.Limit.Quota())
		buf = hv.int(buf, hdrXRemaining, r)
		buf = hv.int(buf, hdrXReset, t)
	}
	return buf, true
}

// rendered reports whether d is a client's limit the headers show: one that
// was actually asked (when one check denies, the limiter may leave later ones
// unasked, which would otherwise render as "r=0"), and not a shadow policy's.
func rendered(d *limiter.Decision) bool { return decided(d) && !d.Shadow }

func anyRendered(v limiter.Verdict) bool {
	for i := range v.Decisions {
		if rendered(&v.Decisions[i]) {
			return true
		}
	}
	return false
}

// decided reports whether a check was actually asked. When one check denies,
// the limiter may leave later ones unasked, which would otherwise render as
// "r=0".
func decided(d *limiter.Decision) bool { return d.Reason != limiter.ReasonNotAsked }

// remainingAndReset gives the r and t values of a decision: for a denial,
// nothing remains and t is the wait until a retry can pass.
func remainingAndReset(d *limiter.Decision) (r, t int64) {
	if !d.Allowed {
		return 0, ceilSeconds(d.RetryAfter)
	}
	return max(d.Remaining, 0), ceilSeconds(d.ResetAfter)
}

// retryAfterSeconds is the Retry-After value: whole seconds rounded up and at
// least 1, so a client that honours it never retries in a hot loop.
func retryAfterSeconds(d time.Duration) int64 { return max(ceilSeconds(d), 1) }

// retryAfterMillis is the body's retry_after_ms: milliseconds rounded up, at
// least 1 for the same reason.
func retryAfterMillis(d time.Duration) int64 {
	return max(ceilDiv(int64(d), int64(time.Millisecond)), 1)
}

func ceilSeconds(d time.Duration) int64 { return ceilDiv(int64(d), int64(time.Second)) }

func ceilDiv(n, unit int64) int64 {
	if n <= 0 {
		return 0
	}
	return (n + unit - 1) / unit
}

// appendSFString appends s as a structured-field string (RFC 9651): quoted,
// with '"' and '\' escaped. Policy names are validated to a safe alphabet;
// escaping keeps the header well-formed even if that changes.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	if sfPlain(s) { // a policy's name, as the config allows them
		b = append(b, s...)
		return append(b, '"')
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		if c < 0x20 || c > 0x7e {
			c = '?' // sf-string allows printable ASCII only
		}
		b = append(b, c)
	}
	return append(b, '"')
}

// sfPlain reports whether s goes into an sf-string as it is: printable
// ASCII without a quote or a backslash.
func sfPlain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// On an llm route the gateway speaks as the provider's own API does, so that
// the official SDKs understand it: errors in OpenAI's shape (the SDKs raise
// their RateLimitError on a 429 and back off by themselves), and OpenAI's
// x-ratelimit-*-requests / -tokens headers beside the IETF fields.

// budgetPeriod is how long a limit's window must be for its exhaustion to
// read as a spent budget (insufficient_quota) rather than a rate limit.
const budgetPeriod = 24 * time.Hour

// rateSets are OpenAI's header sets, x-ratelimit-{limit,remaining,reset}-
// <name>, and the policy costs each shows. A set shows one unit only:
// tokens are never compared with requests or micro-dollars. A dollar
// budget has its own set, in dollars with six decimals.
var rateSets = [...]struct {
	name   string
	counts func(policies.Cost) bool
	usd    bool
	// The set's header names, canonical as http.Header.Set would make
	// them, built once rather than on each response.
	limitKey, remainingKey, resetKey string
}{
	{"requests", func(c policies.Cost) bool { return c == policies.CostRequests }, false,
		"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests"},
	{"tokens", func(c policies.Cost) bool {
		return c == policies.CostTokens || c == policies.CostInputTokens || c == policies.CostOutputTokens
	}, false, "X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens"},
	{"usd", func(c policies.Cost) bool { return c == policies.CostUSD }, true,
		"X-Ratelimit-Limit-Usd", "X-Ratelimit-Remaining-Usd", "X-Ratelimit-Reset-Usd"},
}

// setOpenAIHeadersWith adds OpenAI's rate-limit headers, one set per unit
// (see rateSets), each from the denying policy of its unit or else the most
// restrictive one. costs holds each decision's policy cost. peeked is what
// a peek before the body found: a policy the decision did not read (not
// asked because another denied first, denied without reading its state)
// shows the peek's remaining, so a 429 carries every set that applies with
// its true values.
func setOpenAIHeadersWith(h http.Header, v limiter.Verdict, costs []policies.Cost, peeked []limiter.Decision) {
	var stack [headerStack]byte
	var hv headerValues
	hv.setOn(h, hv.openAI(stack[:0], v, costs, peeked))
}

// openAI renders OpenAI's rate-limit headers into buf (see
// setOpenAIHeadersWith), so that they can share one string with the
// response's other header values.
func (hv *headerValues) openAI(buf []byte, v limiter.Verdict, costs []policies.Cost, peeked []limiter.Decision) []byte {
	deniedBy, denied := v.DeniedBy()
	for _, set := range rateSets {
		var best limiter.Decision
		var bestRemaining int64
		found, bestDenies := false, false
		for i := range v.Decisions {
			if i >= len(costs) || !set.counts(costs[i]) || v.Decisions[i].Shadow {
				continue
			}
			d := v.Decisions[i]
			rem, ok := stateRemaining(d)
			if !ok {
				p, seen := peekedFor(peeked, d.Policy)
				// A denial from the denial cache is newer than a peek
				// that found room: nothing the call could use is left.
				seen = seen && (d.Reason != limiter.ReasonDenialCached || !p.Allowed)
				if !decided(&d) && !seen {
					continue
				}
				if seen {
					rem, _ = stateRemaining(p)
					if !decided(&d) {
						d = p
					}
				}
			}
			denies := i == deniedBy && denied
			if !found || denies || (!bestDenies && rem < bestRemaining) {
				best, bestRemaining, found, bestDenies = d, rem, true, denies
			}
			if denies {
				break
			}
		}
		if !found {
			continue
		}
		reset := best.ResetAfter
		if !best.Allowed {
			reset = max(best.RetryAfter, best.ResetAfter)
		}
		if set.usd {
			buf = appendDollars(buf, best.Limit.Quota())
			hv.end(buf, set.limitKey)
			buf = appendDollars(buf, bestRemaining)
			hv.end(buf, set.remainingKey)
		} else {
			buf = hv.int(buf, set.limitKey, best.Limit.Quota())
			buf = hv.int(buf, set.remainingKey, bestRemaining)
		}
		buf = appendOpenAIDuration(buf, reset)
		hv.end(buf, set.resetKey)
	}
	return buf
}

// stateRemaining is what remains under d's policy, when d read the key's
// state: an admitted decision's units left after it, or a denied one's
// units left that were too few (a large call can be refused with much
// left). ok is false when d says nothing of the state.
func stateRemaining(d limiter.Decision) (int64, bool) {
	switch d.Reason {
	case limiter.ReasonNone, limiter.ReasonLimited, limiter.ReasonLocalFallback:
		return max(d.Remaining, 0), true
	}
	return 0, false
}

func peekedFor(peeked []limiter.Decision, policy string) (limiter.Decision, bool) {
	for _, d := range peeked {
		if d.Policy == policy {
			_, ok := stateRemaining(d)
			return d, ok
		}
	}
	return limiter.Decision{}, false
}

// appendDollars appends micro-dollars as dollars with six decimals.
func appendDollars(b []byte, micro int64) []byte {
	micro = max(micro, 0)
	b = strconv.AppendInt(b, micro/1_000_000, 10)
	b = append(b, '.')
	frac := micro % 1_000_000
	for unit := int64(100_000); unit > 0; unit /= 10 {
		b = append(b, byte('0'+frac/unit))
		frac %= unit
	}
	return b
}

// appendOpenAIDuration appends d as OpenAI's headers write it: "6m0s",
// "1.5s", "120ms" (under a second, in whole milliseconds rounded up; from
// a second, as time.Duration's String of d rounded to the millisecond).
func appendOpenAIDuration(b []byte, d time.Duration) []byte {
	if d <= 0 {
		return append(b, "0s"...)
	}
	if d < time.Second {
		b = strconv.AppendInt(b, ceilDiv(int64(d), int64(time.Millisecond)), 10)
		return append(b, "ms"...)
	}
	u := uint64(d.Round(time.Millisecond)) // Round saturates: still positive
	secs, frac := u/uint64(time.Second), u%uint64(time.Second)
	if secs >= 3600 {
		b = strconv.AppendUint(b, secs/3600, 10)
		b = append(b, 'h')
	}
	if secs >= 60 {
		b = strconv.AppendUint(b, secs/60%60, 10)
		b = append(b, 'm')
	}
	b = strconv.AppendUint(b, secs%60, 10)
	if frac > 0 {
		// Nine digits of nanoseconds, without the trailing zeros.
		var digits [9]byte
		for i := len(digits) - 1; i >= 0; i-- {
			digits[i] = byte('0' + frac%10)
			frac /= 10
		}
		n := len(digits)
		for digits[n-1] == '0' {
			n--
		}
		b = append(b, '.')
		b = append(b, digits[:n]...)
	}
	return append(b, 's')
}
