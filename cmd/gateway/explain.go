package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/ratelimit-gateway/gateway/jwtauth"
	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/limiter/redislimit"
	"github.com/ratelimit-gateway/gateway/policies"
	"github.com/ratelimit-gateway/gateway/proxy"
)

// Exit statuses of "gateway explain".
const (
	explainReachesLimiter = 0 // a route matches and its checks go to the limiter
	explainFailed         = 1 // bad flags, or a config that does not load
	explainAnsweredFirst  = 2 // the gateway answers before the limiter (400, 404, 413, 431, ...)
)

// explainReport is explain's JSON output: one object, the proxy's
// Explanation with the config it was read from.
type explainReport struct {
	Config string `json:"config"`
	// TLS is the certificate a client naming the request's host is served
	// (with server.tls).
	TLS string `json:"tls,omitempty"`
	proxy.Explanation
}

// explainRequest is a request described on the command line.
type explainRequest struct {
	method  string
	url     string
	headers []string // "Name: value"
	remote  string
	body    []byte
	hasBody bool // -d was given: the body is read as the gateway reads it
}

// explainCommand runs "gateway explain" with fs, whose output is stderr:
// it loads the config as check does, builds the described request as Go's
// server would hand it to the gateway, and prints what proxy.Explain finds.
// It sends nothing anywhere. It returns the exit status.
func explainCommand(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) int {
	config := fs.String("config", "gateway.yaml", "path of the config file")
	output := fs.String("o", "text", "output: text or json")
	req := explainRequest{}
	fs.StringVar(&req.method, "X", http.MethodGet, "request method")
	fs.StringVar(&req.remote, "remote", "127.0.0.1:40000", "the socket peer, `IP:PORT` (the client, unless it is a trusted proxy)")
	fs.Func("H", "request header `Name: value` (repeatable)", func(s string) error {
		req.headers = append(req.headers, s)
		return nil
	})
	fs.Func("d", "request `body`, or @FILE: read as the gateway reads it (an llm call's model and tokens)", func(s string) error {
		req.hasBody = true
		if name, ok := strings.CutPrefix(s, "@"); ok {
			data, err := os.ReadFile(name)
			req.body = data
			return err
		}
		req.body = []byte(s)
		return nil
	})
	fs.Usage = func() { explainUsage(fs.Output(), fs) }
	// Flags may follow the URL, as with curl.
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return explainFailed
		}
		if fs.NArg() == 0 {
			break
		}
		positional, args = append(positional, fs.Arg(0)), fs.Args()[1:]
	}
	if len(positional) != 1 {
		fmt.Fprintf(stderr, "gateway explain: want one URL (http://host[:port]/path?query, or a path), got %d arguments\n", len(positional))
		explainUsage(stderr, fs)
		return explainFailed
	}
	req.url = positional[0]
	if *output != "text" && *output != "json" {
		fmt.Fprintf(stderr, "gateway explain: -o must be text or json, got %q\n", *output)
		return explainFailed
	}

	snap, err := policies.Load(*config, checkOptions())
	if err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return explainFailed
	}
	for _, fe := range snap.Warnings {
		fmt.Fprintf(stderr, "warning: %v\n", fe)
	}
	r, err := req.build(snap.Config.Server.Listen)
	if err != nil {
		fmt.Fprintf(stderr, "gateway explain: %v\n", err)
		return explainFailed
	}
	// A JWT is verified as serving would: the signing keys are read once.
	keys, err := newJWTKeys(context.Background(), snap.Tenants.JWT, slog.New(slog.NewTextHandler(stderr, nil)))
	if err != nil {
		fmt.Fprintf(stderr, "gateway explain: tenants.jwt: %v\n", err)
		return explainFailed
	}
	served, err := explainTLS(snap, r.Host)
	if err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return explainFailed
	}
	e := proxy.Explain(snap, r, proxy.ExplainOptions{ReadBody: req.hasBody, RedisKeys: redislimit.KeysFor, Tokens: jwtauth.NewVerifier(keys, 0)})
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(explainReport{Config: snap.Source, TLS: served, Explanation: e}); err != nil {
			fmt.Fprintf(stderr, "gateway explain: %v\n", err)
			return explainFailed
		}
	} else {
		printExplanation(stdout, snap, e)
		if served != "" {
			fmt.Fprintf(stdout, "tls: %s\n", served)
		}
	}
	if !e.ReachesLimiter {
		return explainAnsweredFirst
	}
	return explainReachesLimiter
}

func explainUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, `usage: gateway explain -config gateway.yaml [-X METHOD] [-H 'Name: value']... [-remote IP:PORT] [-d BODY] [-o text|json] URL

Shows what the gateway would do with a request, without sending anything
anywhere (no Redis, no upstream): the canonical path, the route, the client
and its tenant, and for each policy its key (the API key never in clear),
limit, cost, mode and Redis keys. URL is http://host[:port]/path?query, or a
path (the host is then server.listen).

Exit status: 0 the request reaches the limiter; 2 the gateway answers it
before the limiter (400, 404, 413, 431); 1 bad flags or a
config that does not load.

`)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// build makes the request Go's server would hand the gateway: the request
// line and headers are parsed by http.ReadRequest, as the server parses them,
// so RequestURI, Host, Header and ContentLength are what the gateway sees.
// Without -d the body is empty and Content-Length, if given, only declared.
func (q explainRequest) build(listen string) (*http.Request, error) {
	host, target, err := splitURL(q.url, listen)
	if err != nil {
		return nil, err
	}
	if !isToken(q.method) {
		return nil, fmt.Errorf("-X %q is not a method", q.method)
	}
	if _, err := netip.ParseAddrPort(q.remote); err != nil {
		return nil, fmt.Errorf("-remote %q: want IP:PORT (203.0.113.7:51000, [2001:db8::1]:51000)", q.remote)
	}
	var head bytes.Buffer
	fmt.Fprintf(&head, "%s %s HTTP/1.1\r\n", q.method, target)
	hostSet := false
	for _, h := range q.headers {
		name, value, ok := strings.Cut(h, ":")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		switch {
		case !ok || !isToken(name):
			return nil, fmt.Errorf("-H %q: want 'Name: value'", h)
		case strings.ContainsAny(value, "\r\n"):
			return nil, fmt.Errorf("-H %q: a header value cannot hold a line break", name)
		case q.hasBody && (strings.EqualFold(name, "Content-Length") || strings.EqualFold(name, "Transfer-Encoding")):
			return nil, fmt.Errorf("-H %s: -d sets the body and its length", name)
		case strings.EqualFold(name, "Host"):
			if hostSet {
				return nil, errors.New("two Host headers: Go's server answers 400 before the gateway sees the request")
			}
			hostSet, host = true, value
			continue
		}
		fmt.Fprintf(&head, "%s: %s\r\n", name, value)
	}
	fmt.Fprintf(&head, "Host: %s\r\n", host)
	if q.hasBody {
		fmt.Fprintf(&head, "Content-Length: %d\r\n", len(q.body))
	}
	head.WriteString("\r\n")
	head.Write(q.body)
	r, err := http.ReadRequest(bufio.NewReader(&head))
	if err != nil {
		return nil, fmt.Errorf("the request does not parse as HTTP/1.1: %w", err)
	}
	if !q.hasBody {
		r.Body = http.NoBody
	}
	r.RemoteAddr = q.remote
	return r, nil
}

// splitURL returns the host and request target of http://host[:port]/path?q
// as a client sends them (origin form: the path and query, the host in Host),
// or of a bare path with listen as the host. The path is kept as written, so
// crafted paths reach the gateway as they would on the wire.
func splitURL(raw, listen string) (host, target string, err error) {
	rest := raw
	for _, scheme := range []string{"http://", "https://"} {
		if len(raw) >= len(scheme) && strings.EqualFold(raw[:len(scheme)], scheme) {
			rest = raw[len(scheme):]
			end := strings.IndexAny(rest, "/?#")
			if end < 0 {
				end = len(rest)
			}
			host, rest = rest[:end], rest[end:]
			if host == "" {
				return "", "", fmt.Errorf("URL %q has no host", raw)
			}
			break
		}
	}
	if host == "" { // a bare path
		if !strings.HasPrefix(raw, "/") {
			return "", "", fmt.Errorf("URL %q: want http://host[:port]/path?query or a path starting with /", raw)
		}
		host = listen
		if strings.HasPrefix(host, ":") {
			host = "localhost" + host
		}
	}
	rest, _, _ = strings.Cut(rest, "#") // clients never send the fragment
	if rest == "" || rest[0] == '?' {
		rest = "/" + rest
	}
	for i := 0; i < len(rest); i++ {
		if rest[i] <= ' ' || rest[i] == 0x7f {
			return "", "", fmt.Errorf("URL %q: a request target cannot hold spaces or control characters (escape them: %%20)", raw)
		}
	}
	return host, rest, nil
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// printExplanation prints e as "label: value" lines aligned on the values:
// the request, then one block per policy.
func printExplanation(w io.Writer, snap *policies.Snapshot, e proxy.Explanation) {
	var rows [][2]string // a row with an empty label is a blank line
	line := func(label, format string, args ...any) {
		rows = append(rows, [2]string{label + ":", fmt.Sprintf(format, args...)})
	}
	defer func() {
		width := 0
		for _, r := range rows {
			width = max(width, len(r[0]))
		}
		for _, r := range rows {
			if r[0] == "" {
				fmt.Fprintln(w)
				continue
			}
			fmt.Fprintf(w, "%-*s %s\n", width, r[0], r[1])
		}
	}()
	rq := e.Request
	line("config", "%s", snap.Source)
	line("request", "%s %s (host %s, peer %s)", rq.Method, rq.Target, rq.Host, rq.Peer)
	switch {
	case rq.Path == "":
		line("path", "refused")
	case rq.Query != "":
		line("path", "%s?%s", rq.Path, rq.Query)
	default:
		line("path", "%s", rq.Path)
	}
	if len(rq.RemovedHeaders) > 0 {
		line("removed", "%s (hop-by-hop, or client-address headers from an untrusted peer)", strings.Join(rq.RemovedHeaders, ", "))
	}
	var route *policies.Route // the compiled route, for what the text spells out
	if rt := e.Route; rt != nil {
		route = routeNamed(snap, rt.Name)
		upstream, _ := rt.Config["upstream"].(string) // as policies.Redacted shows it
		match, strip := "", ""
		if route != nil {
			match = " (" + describeMatch(route.Match) + ")"
			if route.StripPrefix != "" {
				strip = ", strip_prefix " + route.StripPrefix
			}
		}
		if rt.Pool != nil {
			upstream = "pool of " + count(len(rt.Pool.Members), "member", "members")
		}
		line("route", "%s%s → %s%s → %s", rt.Name, match, upstream, strip, rt.UpstreamPath)
		printPool(line, rt.Pool)
	} else if e.Status == http.StatusNotFound {
		line("route", "none")
	}
	if !e.ReachesLimiter {
		line("result", "%d %s before the limiter: %s (exit %d)", e.Status, http.StatusText(e.Status), e.Reason, explainAnsweredFirst)
		return
	}
	if len(e.Policies) == 0 {
		line("result", "no policies: forwarded unlimited (exit %d)", explainReachesLimiter)
	} else {
		line("result", "reaches the limiter (%s; exit %d)", count(len(e.Policies), "policy", "policies"), explainReachesLimiter)
	}
	if e.QuotaStatus != 0 {
		line("then", "%d %s: %s", e.QuotaStatus, http.StatusText(e.QuotaStatus), e.Reason)
	}
	if e.RejectedBy != "" {
		line("then", "401: policy %s needs a key this request lacks (the others count it first; 429 if one denies)", e.RejectedBy)
	}
	printIdentity(line, e.Identity)
	if l := e.LLM; l != nil && route != nil {
		printLLM(line, l, route.DefaultMaxTokens)
	}
	if id := e.Idempotency; id != nil && route != nil && route.Idempotency != nil {
		printIdempotency(line, id, route.Idempotency)
	}
	for i, p := range e.Policies {
		rows = append(rows, [2]string{})
		line(fmt.Sprintf("policy %d", i+1), "%s", p.Name)
		if pol := snap.Policies[p.Name]; pol != nil {
			printPolicy(line, pol, p)
		}
	}
}

// routeNamed is snap's route called name; nil for none.
func routeNamed(snap *policies.Snapshot, name string) *policies.Route {
	for _, r := range snap.Routes {
		if r.Name == name {
			return r
		}
	}
	return nil
}

type lineFunc func(label, format string, args ...any)

func printIdentity(line lineFunc, id *proxy.ExplainedIdentity) {
	switch {
	case id.ClientIP == "":
		line("client ip", "unknown (the peer is not an IP address)")
	case id.PeerTrusted:
		line("client ip", "%s (from %s: the peer is a trusted proxy)", id.ClientIP, id.ChainHeader)
	default:
		line("client ip", "%s (the socket peer)", id.ClientIP)
	}
	line("client net", "%s (what an ip key reads)", orNone(id.ClientNet))
	switch {
	case !id.APIKeyPresented:
		line("api key", "none")
	case id.Tenant == "":
		line("api key", "in %s, sha256 %s…: unknown (no tenant)", id.APIKeyHeader, id.APIKeySHA256)
	default:
		line("api key", "in %s, sha256 %s…", id.APIKeyHeader, id.APIKeySHA256)
	}
	switch {
	case id.TokenRefused != "":
		line("jwt", "refused (%s): 401 once the policies that need no identity let it through", id.TokenRefused)
	case id.Credential == "jwt":
		line("jwt", "verified")
	}
	line("identified by", "%s", orNone(id.Credential))
	line("tenant", "%s", orNone(id.Tenant))
	line("plan", "%s", orNone(id.Plan))
}

func printLLM(line lineFunc, l *proxy.ExplainedLLM, defaultMaxTokens int64) {
	switch {
	case !l.Call:
		line("llm", "%s", l.Note)
	case l.BeforeBody:
		line("llm", "%s call: %s", l.API, l.Note)
	case !l.BodyRead:
		given := "the model family's default"
		if defaultMaxTokens > 0 {
			given = fmt.Sprintf("default_max_tokens %d", defaultMaxTokens)
		}
		line("llm", "%s call; token costs and the model depend on the body (pass it with -d): prompt tokens + output cap (without one: %s)", l.API, given)
	default:
		line("llm", "%s call on %s: %d prompt tokens + %d output → reserves %d tokens, settled to the usage after", l.API, orNone(l.Model), l.PromptTokens, l.MaxOutput, l.PromptTokens+l.MaxOutput)
		if l.Price != "" {
			line("price", "%s", l.Price)
		}
	}
}

func printIdempotency(line lineFunc, id *proxy.ExplainedIdempotency, cfg *policies.Idempotency) {
	need := "optional"
	if cfg.Required {
		need = "required"
	}
	conflict := "409 while the first runs"
	if cfg.Wait {
		conflict = "wait up to " + cfg.MaxWait.String() + " for the first"
	}
	switch {
	case !id.Applies:
		line("idempotency", "%s on %s (%s): not for this method", cfg.Header, strings.Join(cfg.Methods, ","), need)
	case !id.Present:
		line("idempotency", "%s on %s (%s): not sent, forwarded without it", cfg.Header, strings.Join(cfg.Methods, ","), need)
	case id.NeedsAPIKey:
		line("idempotency", "%s %q without a known API key: 401 (require_api_key)", cfg.Header, id.Key)
	default:
		line("idempotency", "%s %q, scoped by %s (store key %q); duplicates: %s, its response replayed for %s", cfg.Header, id.Key, id.Scope, id.ScopedKey, conflict, cfg.ReplayTTL)
	}
}

// printPolicy prints p, the check of the compiled policy pol.
func printPolicy(line lineFunc, pol *policies.Policy, p proxy.ExplainedPolicy) {
	rule := pol.Rule
	where := "in-process, per instance"
	if rule.Algorithm.Shared() {
		where = "Redis, shared by every instance"
	}
	line("  algorithm", "%s (%s)", cmp.Or(rule.Algorithm, limiter.TokenBucket), where)
	switch p.Outcome {
	case proxy.OutcomeChecked:
		line("  key", "%s = %s", pol.KeySpec, p.Key)
	case proxy.OutcomeAnonymous:
		line("  key", "%s: missing, counted in the one anonymous bucket", pol.KeySpec)
	case proxy.OutcomeSkipped:
		why := "missing, the policy does not apply"
		if p.Note != "" {
			why = p.Note
		}
		line("  key", "%s: %s", pol.KeySpec, why)
	case proxy.OutcomeRejects:
		line("  key", "%s: missing, 401 once the others counted the request", pol.KeySpec)
	default:
		line("  key", "%s: %s", pol.KeySpec, p.Note)
	}
	missing := map[policies.MissingKey]string{
		policies.MissingSkip:   "skip (the policy does not apply)",
		policies.MissingShared: "shared (one anonymous bucket)",
		policies.MissingReject: "reject (401)",
	}[cmp.Or(pol.OnMissingKey, policies.MissingShared)]
	line("  missing key", "%s", orNone(missing))
	line("  limit", "%s", describePlanLimit(pol, p.Plan))
	cost := string(pol.Cost)
	switch {
	case p.Units > 0 && pol.Cost == policies.CostRequests:
		line("  cost", "%d request", p.Units)
	case p.Units > 0:
		line("  cost", "%d %s", p.Units, unitName(cost))
	case p.Outcome == proxy.OutcomeSkipped || p.Outcome == proxy.OutcomeRejects:
		line("  cost", "none (%s)", cost)
	default:
		line("  cost", "%s: unknown without the body", unitName(cost))
	}
	mode := "enforce"
	if p.Shadow {
		mode = "shadow (decided and reported, never enforced)"
	}
	onLimit := "reject (429 at once)"
	if pol.MaxDelay > 0 {
		onLimit = fmt.Sprintf("delay up to %s, %d waiters per key, then 429", pol.MaxDelay, pol.MaxWaiters)
	}
	line("  mode", "%s; over the limit: %s", mode, onLimit)
	if rule.Algorithm.Shared() {
		failure := map[limiter.FailureMode]string{
			limiter.FailAllow: "allow (forwarded unchecked)",
			limiter.FailDeny:  "deny (503)",
		}[cmp.Or(rule.OnRedisError, limiter.FailAllow)]
		if rule.OnRedisError == limiter.FailLocal {
			failure = fmt.Sprintf("local (%s of the limit in-process)", strconv.FormatFloat(rule.LocalShare, 'g', -1, 64))
		}
		line("  redis down", "%s", orNone(failure))
		if len(p.RedisKeys) > 0 {
			line("  redis keys", "%s", strings.Join(p.RedisKeys, " "))
		}
	}
	if p.Note != "" && p.Outcome != proxy.OutcomeUnknown && p.Outcome != proxy.OutcomeSkipped {
		line("  note", "%s", p.Note)
	}
}

// describePlanLimit shows the limit that applies as check does, with the
// plan it comes from ("" for the policy's own).
func describePlanLimit(pol *policies.Policy, plan string) string {
	lim := pol.Limit
	if plan != "" {
		lim = pol.Plans[plan]
	}
	if alg := pol.Rule.Algorithm; alg.InFlight() {
		s := fmt.Sprintf("%d in flight at once", lim.Rate)
		if alg == limiter.SharedConcurrency {
			s += ", lease " + limiter.ShortDuration(lim.Period)
		}
		return s
	}
	s := describeLimit(lim, pol.Rule.Algorithm.Windowed(), pol.Cost)
	if plan != "" {
		s += " (plan " + plan + ")"
	}
	return s
}

func unitName(cost string) string {
	if cost == string(policies.CostUSD) {
		return "micro-dollars"
	}
	return cost
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// printPool spells out a route's pool: its balance and retries, each
// member with its health, and where balance: hash sends the request.
func printPool(line func(string, string, ...any), ep *proxy.ExplainedPool) {
	if ep == nil {
		return
	}
	retries := "no retries"
	if ep.Retries {
		retries = fmt.Sprintf("retries on another member when safe (%d attempts at most)", ep.Attempts)
	}
	line("pool", "%s, %s", ep.Balance, retries)
	if !ep.LiveHealth {
		line("health", "as a gateway that has just started sees it (a running one's: gateway_pool_member_healthy in /metrics)")
	}
	for _, m := range ep.Members {
		line("member", "%s %s (weight %d, %s): %s", m.Name, m.URL, m.Weight, m.Protocol, m.Health)
	}
	switch {
	case ep.HashPick != "":
		line("hash", "%s of this request → %s (while every member is in)", ep.HashKey, ep.HashPick)
	case ep.HashKey != "":
		line("hash", "this request lacks %s: balanced in turn", ep.HashKey)
	}
}
