package pool

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"
)

// checkTick is how often Run looks for probes that are due.
const checkTick = 250 * time.Millisecond

// Run probes the members of every pool of the current snapshot that has
// an active check, each every interval of its check, until ctx ends; then
// it waits for the probes in flight and returns nil. The pools a reload
// removed are probed no more: each tick reads the current snapshot.
func (p *Pools) Run(ctx context.Context) error {
	t := time.NewTicker(checkTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			p.Probe(ctx)
		}
	}
}

// Probe probes, at once and in parallel, every member whose probe is due
// by the Pools' clock, and returns when each has its result. A member is
// due when it was never probed or its check's interval has passed since.
func (p *Pools) Probe(ctx context.Context) {
	idx := p.current()
	if idx == nil {
		return
	}
	now := p.now()
	var wg sync.WaitGroup
	for _, st := range idx.states {
		check := st.pool.Check
		if check == nil {
			continue
		}
		for i, m := range st.members {
			if m.nextProbe.Load() > now.UnixNano() || !m.probing.CompareAndSwap(false, true) {
				continue
			}
			m.nextProbe.Store(now.Add(check.Interval).UnixNano())
			wg.Go(func() {
				defer m.probing.Store(false)
				st.probed(i, p.probe(ctx, st, i))
			})
		}
	}
	wg.Wait()
}

// probe sends the i-th member its check's GET and reports whether it
// passed: a 2xx or 3xx within the check's timeout.
func (p *Pools) probe(ctx context.Context, st *State, i int) bool {
	check, u := st.pool.Check, *st.pool.Members[i].URL
	u.Path, u.RawPath, u.RawQuery = check.Path, "", ""
	ctx, cancel := context.WithTimeout(ctx, check.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return false
	}
	req.Header.Set("User-Agent", "ratelimit-gateway health check")
	res, err := p.transport.RoundTrip(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, io.LimitReader(res.Body, 4<<10))
	res.Body.Close()
	return res.StatusCode >= 200 && res.StatusCode < 400
}

// probed counts the i-th member's probe: healthy passes in a row bring a
// member that is down back, unhealthy failures in a row take it down,
// unless half of the pool is out already.
func (s *State) probed(i int, passed bool) {
	m, check := s.members[i], s.pool.Check
	if passed {
		m.flunked.Store(0)
		if m.passes.Add(1) >= int64(check.Healthy) && m.down.Load() {
			m.down.Store(false)
		}
		return
	}
	m.passes.Store(0)
	if m.flunked.Add(1) < int64(check.Unhealthy) || m.down.Load() {
		return
	}
	p := s.pools
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.now().UnixNano()
	out := 0
	for _, o := range s.members {
		if o.ejectedUntil.Load() > t || o.down.Load() {
			out++
		}
	}
	if (out+1)*2 <= len(s.members) {
		m.down.Store(true)
	}
}
