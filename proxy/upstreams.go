package proxy

import (
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/ratelimit-gateway/gateway/policies"
	"github.com/ratelimit-gateway/gateway/proxy/pool"
)

// transportFor is the transport that speaks protocol to a member: the
// same choice as a route's upstream_protocol.
func (h *Handler) transportFor(protocol policies.UpstreamProtocol) http.RoundTripper {
	return h.protocols.For(protocol)
}

// pickMember chooses the first member a request of a pool goes to: st.pool
// and st.member are set, and its URL returned.
func (h *Handler) pickMember(st *requestState) *url.URL {
	route := st.route()
	st.pool = h.pools.For(st.p.snap, route)
	if hk := route.Pool.HashKey; hk != nil {
		st.poolKey, st.hasPoolKey = hk(st.p.r, &st.p.subject)
	}
	st.member, _ = st.pool.Pick(h.pools.Now(), st.poolKey, st.hasPoolKey, 0)
	return route.Pool.Members[st.member].URL
}

// roundTripPool sends req to the member rewrite picked and, while the
// route's retry rule allows it, to another member after a connect error or
// a retried status. Each attempt is told to its member's health; the last
// one's answer, or error, is the exchange's, in flight at its member until
// forward releases it (see releaseMember). Nothing has reached the client
// until this returns, so a retry is always before the answer's first byte;
// the request was decided, and charged, once before.
func (h *Handler) roundTripPool(st *requestState, req *http.Request) (*http.Response, error) {
	cfg := st.route().Pool
	for attempt := 1; ; attempt++ {
		i := st.member
		st.tried = st.tried.Add(i)
		m := cfg.Members[i]
		if attempt > 1 {
			var err error
			if req, err = toMember(req, m.URL); err != nil {
				h.pools.Budget().RetryDone()
				return nil, err
			}
		}
		start := h.pools.Now()
		st.pool.Begin(i)
		res, err := h.transportFor(m.Protocol).RoundTrip(req)
		if attempt > 1 {
			h.pools.Budget().RetryDone()
		}
		now := h.pools.Now()
		wait := retryAfter(res, now)
		st.pool.End(i, now, st.outcome(res, err, wait), now.Sub(start), wait)
		st.rep.upstream.member, st.rep.upstream.retries = m.Name, st.retries
		if !h.mayRetry(st, req, attempt, res, err) {
			return res, err
		}
		next, ok := st.pool.Pick(now, st.poolKey, st.hasPoolKey, st.tried)
		if !ok || !h.pools.Budget().TryRetry() {
			return res, err
		}
		if res != nil {
			res.Body.Close()
		}
		st.pool.Release(i)
		st.member = next
		st.retries++
	}
}

// outcome is what an attempt says of its member's health.
func (st *requestState) outcome(res *http.Response, err error, retryAfter time.Duration) pool.Outcome {
	switch {
	case st.inbound().Err() != nil:
		return pool.Abandoned
	case retryAfter > 0:
		return pool.Deferred
	case err != nil, res.StatusCode >= 500:
		return pool.Failure
	}
	return pool.Success
}

// mayRetry reports whether an attempt that ended in res or err may be sent
// to another member: the route retries, attempts remain, the client and
// the route's deadline are still waiting, the body can be sent again, and
// either nothing was sent (a connect error) or the failure is a retried
// status or broken exchange of a request that may be sent twice (an
// idempotent method, or an Idempotency-Key the members honour).
func (h *Handler) mayRetry(st *requestState, req *http.Request, attempt int, res *http.Response, err error) bool {
	r := st.route().Pool.Retry
	switch {
	case r == nil || attempt >= r.Attempts:
		return false
	case st.inbound().Err() != nil || st.Context.Err() != nil:
		return false
	case err != nil && st.deadline.timedOut(err):
		return false
	case req.Body != nil && req.Body != http.NoBody && req.GetBody == nil:
		return false
	case err != nil && connectError(err):
		return true
	case err == nil && !r.Retries(res.StatusCode):
		return false
	}
	return idempotentMethod(req.Method) || r.IdempotencyKey && carriesIdempotencyKey(req, st.route())
}

// connectError reports whether err is a failure to connect: the request
// never left.
func connectError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// idempotentMethod reports whether method is idempotent (RFC 9110, 9.2.2):
// sending it twice does what sending it once does.
func idempotentMethod(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// carriesIdempotencyKey reports whether req carries an idempotency key: in
// the header the route's idempotency block names, Idempotency-Key
// otherwise.
func carriesIdempotencyKey(req *http.Request, route *policies.Route) bool {
	name := "Idempotency-Key"
	if id := route.Idempotency; id != nil {
		name = id.Header
	}
	return len(req.Header.Values(name)) > 0
}

// toMember is req sent to the member at target instead, its body from the
// start again.
func toMember(req *http.Request, target *url.URL) (*http.Request, error) {
	out := new(http.Request)
	*out = *req
	u := *req.URL
	u.Scheme, u.Host = target.Scheme, target.Host
	out.URL = &u
	if req.Body != nil && req.Body != http.NoBody {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		out.Body = body
	}
	return out, nil
}

// retryAfter is how long a 429 or 503 answer asks for no more requests: its
// Retry-After in seconds or as a date; 0 for none.
func retryAfter(res *http.Response, now time.Time) time.Duration {
	if res == nil || res.StatusCode != http.StatusTooManyRequests && res.StatusCode != http.StatusServiceUnavailable {
		return 0
	}
	v := res.Header.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(min(s, int64(24*time.Hour/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// upstreamName is the upstream of st as logs name it: the member's name in
// a pool, the redacted URL otherwise.
func (st *requestState) upstreamName() string {
	if st.pool != nil {
		return st.route().Pool.Members[st.member].Name
	}
	return policies.RedactURL(st.route().Upstream.String())
}
