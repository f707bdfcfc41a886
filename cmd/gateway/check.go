package main

import (
	"fmt"
	"io"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/ratelimit-gateway/gateway/builtin"
	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
)

// check loads the config as serve would and prints routes → policies →
// limits to w, and each warning (a GATEWAY_ variable that names no setting,
// a trusted_proxies entry that trusts everyone) to warnings. Warnings alone
// do not fail the check. A failed load's error carries its warnings too.
func check(path string, w, warnings io.Writer) error {
	snap, err := policies.Load(path, checkOptions())
	if err != nil {
		return err
	}
	for _, fe := range snap.Warnings {
		fmt.Fprintf(warnings, "warning: %v\n", fe)
	}
	printSnapshot(w, snap)
	return printTLS(w, snap)
}

// checkOptions are the load options of check and explain: the process
// environment, and the shipped built-in upstreams as placeholders (nothing
// is started), so a name the binary does not ship is an error.
func checkOptions() policies.Options {
	return policies.Options{Env: os.Environ(), Builtins: policies.Placeholders(builtin.Names())}
}

func printSnapshot(w io.Writer, snap *policies.Snapshot) {
	fmt.Fprintf(w, "%s: ok (%s, %s)\n\n", snap.Source, count(len(snap.Routes), "route", "routes"), count(len(snap.Policies), "policy", "policies"))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ROUTE\tMATCH\tUPSTREAM\tPOLICY\tKEY\tALGORITHM\tLIMIT")
	for _, rt := range snap.Routes {
		upstream := shownUpstream(rt.Upstream)
		if rt.Pool != nil {
			upstream = "pool: " + memberNames(rt.Pool)
		}
		if !rt.UpstreamProtocol.Auto() {
			upstream += " (" + string(rt.UpstreamProtocol) + ")"
		}
		if len(rt.Policies) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\tunlimited\n", rt.Name, describeMatch(rt.Match), upstream)
		}
		for i, p := range rt.Policies {
			name, match, up := rt.Name, describeMatch(rt.Match), upstream
			if i > 0 {
				name, match, up = "", "", ""
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, match, up, p.Name(), p.KeySpec, describeAlgorithm(p.Rule), describeLimits(p))
		}
	}
	tw.Flush()
	for _, rt := range snap.Routes {
		if pl := rt.Pool; pl != nil {
			fmt.Fprintf(w, "\nroute %s: %s\n", rt.Name, describePool(pl))
		}
	}
	for _, rt := range snap.Routes {
		if id := rt.Idempotency; id != nil {
			fmt.Fprintf(w, "\nroute %s: %s\n", rt.Name, describeIdempotency(id))
		}
	}
}

// describeIdempotency says in one line what a route does with duplicates.
func describeIdempotency(id *policies.Idempotency) string {
	need := "optional"
	if id.Required {
		need = "required"
	}
	if id.RequireAPIKey {
		need += ", with a known API key"
	}
	conflict := "409 while the first runs"
	if id.Wait {
		conflict = fmt.Sprintf("waits up to %s for the first", id.MaxWait)
	}
	store := "503 when the store fails"
	if id.FailOpen {
		store = "unprotected when the store fails"
	}
	return fmt.Sprintf("idempotency on %s: %s (%s), once per key; duplicates: %s, its response replayed for %s; lock %s, fencing token in %s; %s",
		strings.Join(id.Methods, ","), id.Header, need, conflict, id.ReplayTTL, id.LockTTL, id.FencingHeader, store)
}

// describeAlgorithm adds the failure mode to shared algorithms.
func describeAlgorithm(p *limiter.Rule) string {
	if !p.Algorithm.Shared() {
		return string(p.Algorithm)
	}
	mode := string(p.OnRedisError)
	if p.OnRedisError == limiter.FailLocal {
		mode = fmt.Sprintf("local %g", p.LocalShare)
	}
	return fmt.Sprintf("%s (redis down: %s)", p.Algorithm, mode)
}

func describeMatch(m policies.Match) string {
	var parts []string
	if m.Host != "" {
		parts = append(parts, "host="+m.Host)
	}
	if m.Path != "" {
		parts = append(parts, "path="+m.Path)
	}
	if m.PathPrefix != "" {
		parts = append(parts, "prefix="+m.PathPrefix)
	}
	if len(m.Methods) > 0 {
		parts = append(parts, strings.Join(m.Methods, ","))
	}
	for _, h := range m.Headers {
		if h.Value == "" {
			parts = append(parts, h.Name)
		} else {
			// The value may be a shared secret (policies.Redacted's rule).
			parts = append(parts, h.Name+"=REDACTED")
		}
	}
	if len(parts) == 0 {
		return "*"
	}
	return strings.Join(parts, " ")
}

func describeLimits(p *policies.Policy) string {
	window := p.Rule.Algorithm.Windowed()
	s := describeLimit(p.Limit, window, p.Cost)
	if len(p.Plans) == 0 {
		return s
	}
	plans := make([]string, 0, len(p.Plans))
	for name, l := range p.Plans {
		plans = append(plans, name+": "+describeLimit(l, window, p.Cost))
	}
	sort.Strings(plans)
	return s + " (plans " + strings.Join(plans, "; ") + ")"
}

// describeLimit shows a limit in the policy's unit: requests, tokens, or
// dollars (kept as micro-dollars).
func describeLimit(l limiter.Limit, window bool, cost policies.Cost) string {
	if l.DenyAll() {
		return "deny all"
	}
	per := l.Per()
	amount := func(n int64) string {
		switch {
		case cost == policies.CostUSD:
			return fmt.Sprintf("$%g", float64(n)/policies.MicroUSD)
		case cost.CountsTokens():
			return fmt.Sprintf("%d %s", n, cost)
		}
		return strconv.FormatInt(n, 10)
	}
	if window {
		return fmt.Sprintf("%s/%s", amount(l.Rate), per)
	}
	return fmt.Sprintf("%s/%s burst %s", amount(l.Rate), per, amount(l.Burst))
}

func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// memberNames lists a pool's members by name.
func memberNames(pl *policies.Pool) string {
	names := make([]string, len(pl.Members))
	for i, m := range pl.Members {
		names[i] = m.Name
	}
	return strings.Join(names, ", ")
}

// describePool says in one line what a route's pool does: its members
// (URLs redacted), balance, health and retries.
func describePool(pl *policies.Pool) string {
	var b strings.Builder
	b.WriteString("pool of")
	for i, m := range pl.Members {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %s %s (weight %d)", m.Name, shownUpstream(m.URL), m.Weight)
	}
	fmt.Fprintf(&b, "; %s", pl.Balance)
	if pl.HashKeySpec != "" {
		fmt.Fprintf(&b, " by %s", pl.HashKeySpec)
	}
	h := pl.Health
	fmt.Fprintf(&b, "; ejects after %d failures in a row for %s × n (at most %s)", h.Failures, h.Ejection, h.MaxEjection)
	if c := pl.Check; c != nil {
		fmt.Fprintf(&b, "; probes %s every %s (down after %d, back after %d)", c.Path, c.Interval, c.Unhealthy, c.Healthy)
	}
	if r := pl.Retry; r != nil {
		fmt.Fprintf(&b, "; retries when safe, %d attempts at most, on %v", r.Attempts, r.Statuses)
	} else {
		b.WriteString("; no retries")
	}
	return b.String()
}

// shownUpstream is an upstream's URL redacted, or builtin:NAME for a
// built-in one.
func shownUpstream(u *url.URL) string {
	if u.Scheme == "builtin" || strings.HasSuffix(u.Hostname(), ".invalid") {
		return "builtin:" + strings.TrimSuffix(strings.TrimPrefix(u.Hostname(), "builtin."), ".invalid")
	}
	return policies.RedactURL(u.String())
}
