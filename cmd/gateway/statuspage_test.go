package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

const statusPageConfig = `
server: {listen: "127.0.0.1:0"}
admin: {listen: "127.0.0.1:0", token: st4tus-t0ken-7e2a91c05f3b8d4a6c1e, metrics_models: [gpt-4o-mini]}
redis: {addrs: ["REDIS"], timeout: 2s, queue_timeout: 2s}
tenants:
  keys:
    sk-acme: {tenant: acme, plan: free}
routes:
  - name: llm
    match: {path_prefix: /v1/, methods: [POST]}
    upstream: builtin:openai-mock
    llm: openai
    default_max_tokens: 64
    policies: [llm-tokens, llm-dollars]
  - name: shared
    match: {path_prefix: /shared}
    upstream: builtin:echo
    policies: [per-user]
  - name: api
    match: {path_prefix: /}
    upstream: builtin:echo
    policies: [per-ip]
policies:
  per-ip: {key: ip, rate: 3, per: 1h}
  per-user: {key: "header:X-User", algorithm: gcra, rate: 2, per: 1h}
  llm-tokens: {key: tenant, cost: tokens, rate: 1000, per: 24h, on_missing_key: reject}
  llm-dollars: {key: tenant, cost: usd, rate: 5, per: 24h, on_missing_key: reject}
prices:
  default: {input: 150, output: 600}
`

// TestStatusPageInABrowser drives Debian's chromium, headless, against a
// running gateway after a known sequence of requests: the page asks for
// the token, logs in through its form (the session cookie is HttpOnly, so
// no script sees it, and the token never appears in a URL), then shows per
// route, per refused key, per Redis node and per tenant the numbers
// /metrics has once the traffic has stopped. The screenshot is saved as
// the test's artifact (go test -artifacts).
func TestStatusPageInABrowser(t *testing.T) {
	browser, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium not found on PATH: the status page check needs it (make test installs it as root, or: apt-get install -y chromium)")
	}
	rds := redistest.Start(t)
	cfg := strings.Replace(statusPageConfig, "REDIS", rds.Addr(), 1)
	g := startGateway(t, "gw", writePressureConfig(t, cfg))
	adm := g.adminBase(t)
	c := newTestClient(t)

	// The known sequence: 5 on api (3 admitted), 4 of one user on shared
	// (2 admitted, on Redis), 2 LLM calls of acme.
	// Generous Redis deadlines: on a busy machine a decision that runs out
	// of time is a 429 no limit decided (not one /admin/top counts), which
	// would make this sequence's numbers depend on the machine's load.
	want := map[string][]int{}
	for range 5 {
		want["api"] = append(want["api"], mustSend(t, c, "GET", g.base+"/x").status)
	}
	for range 4 {
		want["shared"] = append(want["shared"], mustSend(t, c, "GET", g.base+"/shared", "X-User", "user-secret-42").status)
	}
	for range 2 {
		req, _ := http.NewRequest("POST", g.base+"/v1/chat/completions",
			strings.NewReader(`{"model":"gpt-4o-mini","max_tokens":20,"messages":[{"role":"user","content":"say something short"}]}`))
		req.Header.Set("X-API-Key", "sk-acme")
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want["llm"] = append(want["llm"], resp.StatusCode)
	}
	if fmt.Sprint(want) != "map[api:[200 200 200 429 429] llm:[200 200] shared:[200 200 429 429]]" {
		t.Fatalf("statuses: got %v", want)
	}
	// A request is counted once its handler has returned, which can be
	// after its client has the answer: wait until all 11 are, so the
	// scrape and the page read the same numbers.
	var text []byte
	pollUntil(t, 10*time.Second, "all 11 requests counted in /metrics", func() bool {
		code, body := adminDo(t, "GET", adm+"/metrics", "st4tus-t0ken-7e2a91c05f3b8d4a6c1e")
		if code != http.StatusOK {
			t.Fatalf("/metrics: %d", code)
		}
		text = body
		n := 0.0
		for _, l := range []string{"route=api,outcome=allowed", "route=api,outcome=limited", "route=shared,outcome=allowed", "route=shared,outcome=limited", "route=llm,outcome=allowed"} {
			v, _ := scrapeLookup(t, text, "gateway_requests_total", l)
			n += v
		}
		return n == 11
	})
	_, cfgBody := adminDo(t, "GET", adm+"/admin/config", "st4tus-t0ken-7e2a91c05f3b8d4a6c1e")
	var config struct {
		Digest string `json:"digest"`
	}
	if err := json.Unmarshal(cfgBody, &config); err != nil || len(config.Digest) != 64 {
		t.Fatalf("/admin/config: %s (%v), want a digest", cfgBody, err)
	}
	metric := func(name, labels string) string {
		return strconv.FormatFloat(scrapeValue(t, text, name, labels), 'f', -1, 64)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser),
		chromedp.Flag("headless", true),
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true),
		chromedp.WindowSize(1280, 1000),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(bctx); err != nil { // starts the browser; no timeout on this first call
		t.Fatalf("starting chromium: %v", err)
	}
	ctx, cancelTimeout := context.WithTimeout(bctx, 90*time.Second)
	defer cancelTimeout()

	if err := chromedp.Do(ctx,
		chromedp.Navigate(adm+"/status"),
		chromedp.WaitVisible(chromedp.ID("login")),
	); err != nil {
		t.Fatalf("driving chromium to the page: %v", err)
	}
	loginShown, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`!document.getElementById("login").classList.contains("hidden")`))
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("token"), "st4tus-t0ken-7e2a91c05f3b8d4a6c1e")); err != nil {
		t.Fatalf("typing the token: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.Submit(chromedp.ID("token"))); err != nil {
		t.Fatalf("submitting: %v", err)
	}
	if err := chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.CSS(`body[data-loaded="yes"] #main`)),
	); err != nil {
		t.Fatalf("logging in through the form: %v", err)
	}
	sels := map[string]string{
		"api.allowed":    `tr[data-route="api"] td[data-k="allowed"]`,
		"api.limited":    `tr[data-route="api"] td[data-k="limited"]`,
		"api.failed":     `tr[data-route="api"] td[data-k="failed"]`,
		"shared.allowed": `tr[data-route="shared"] td[data-k="allowed"]`,
		"shared.limited": `tr[data-route="shared"] td[data-k="limited"]`,
		"llm.allowed":    `tr[data-route="llm"] td[data-k="allowed"]`,
		"top.ip":         `div[data-policy="per-ip"] tr[data-who="ip 127.0.0.1/32"] td[data-k="count"]`,
		"top.user":       `div[data-policy="per-user"] td[data-k="count"]`,
		"top.user.who":   `div[data-policy="per-user"] tr[data-who] td`,
		"redis.errors":   `tr[data-node="all"] td[data-k="errors"]`,
		"redis.breaker":  `tr[data-node="all"] td:nth-child(2)`,
		"acme.tokens":    `tr[data-tenant="acme"] td[data-k="tokens"]`,
		"acme.quota":     `tr[data-tenant="acme"] td:last-child`,
		"acme.usd":       `tr[data-tenant="acme"] td[data-k="usd"]`,
		"digest":         `#cfg-digest`,
	}
	// Every cell at one instant: the page redraws every 2 seconds, so a
	// node found by one query may be gone by the next.
	selJSON, err := json.Marshal(sels)
	if err != nil {
		t.Fatal(err)
	}
	read, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]*string](`(() => {
		const sels = `+string(selJSON)+`, out = {};
		for (const [k, s] of Object.entries(sels)) { const e = document.querySelector(s); out[k] = e ? e.textContent : null; }
		const line = document.querySelector('tr[data-route="api"] svg polyline.limited');
		out["chart"] = line ? line.getAttribute("points") : null;
		return out;
	})()`))
	if err != nil {
		t.Fatalf("reading the page: %v", err)
	}
	cells := map[string]*string{}
	for k := range sels {
		if read[k] == nil {
			t.Fatalf("the page shows no %s (%s)", k, sels[k])
		}
		cells[k] = read[k]
	}
	// The chart: the api route's limited line leaves its baseline (y 33)
	// in the interval that had the 2 refusals.
	if read["chart"] == nil {
		t.Fatal("the page shows no chart for api")
	}
	pts := strings.Fields(*read["chart"])
	risen := slices.ContainsFunc(pts, func(p string) bool { return !strings.HasSuffix(p, ",33.0") })
	if len(pts) < 2 || !strings.HasSuffix(pts[0], ",33.0") || !risen {
		t.Errorf("api's limited line: got points %q, want one from the baseline (y 33.0) that leaves it", *read["chart"])
	}
	location, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	cookies, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.cookie`))
	if err != nil {
		t.Fatal(err)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if !loginShown {
		t.Error("the page without a session: got no login form, want one")
	}
	if strings.Contains(location, "t0ken") || location != adm+"/status" {
		t.Errorf("location after login: got %q, want %s/status without the token", location, adm)
	}
	if cookies != "" {
		t.Errorf("document.cookie: got %q, want nothing visible to scripts (HttpOnly)", cookies)
	}
	for _, c := range []struct{ cell, want string }{
		{"api.allowed", metric("gateway_requests_total", "route=api,outcome=allowed")},
		{"api.limited", metric("gateway_requests_total", "route=api,outcome=limited")},
		{"api.failed", "0"},
		{"shared.allowed", metric("gateway_requests_total", "route=shared,outcome=allowed")},
		{"shared.limited", metric("gateway_requests_total", "route=shared,outcome=limited")},
		{"llm.allowed", metric("gateway_requests_total", "route=llm,outcome=allowed")},
		{"top.ip", metric("gateway_policy_decisions_total", "route=api,policy=per-ip,outcome=limited")},
		{"top.user", metric("gateway_policy_decisions_total", "route=shared,policy=per-user,outcome=limited")},
		{"redis.errors", metric("gateway_redis_errors_total", "")},
		{"redis.breaker", "closed"},
		{"acme.tokens", metric("gateway_llm_tokens_total", "tenant=acme,model=gpt-4o-mini")},
		{"acme.usd", strconv.FormatFloat(scrapeValue(t, text, "gateway_llm_cost_usd_total", "tenant=acme,model=gpt-4o-mini"), 'f', 6, 64)},
		{"digest", config.Digest},
	} {
		if got := *cells[c.cell]; got != c.want {
			t.Errorf("%s: the page shows %q, /metrics says %q", c.cell, got, c.want)
		}
	}
	if who := *cells["top.user.who"]; !strings.HasPrefix(who, "header:X-User sha256:") || strings.Contains(who, "user-secret-42") {
		t.Errorf("refused header key shown as %q, want a short digest, never the value", who)
	}
	tokens := metric("gateway_llm_tokens_total", "tenant=acme,model=gpt-4o-mini")
	if q := *cells["acme.quota"]; !strings.Contains(q, "llm-tokens: "+tokens+" / 1000 tokens per 24h") {
		t.Errorf("acme's quota: the page shows %q, want llm-tokens: %s / 1000 tokens per 24h", q, tokens)
	}
	if *cells["api.allowed"] != "3" || *cells["api.limited"] != "2" {
		t.Errorf("api: page %s allowed / %s limited, want 3 / 2 as sent", *cells["api.allowed"], *cells["api.limited"])
	}
	out := filepath.Join(t.ArtifactDir(), "status.png")
	if err := os.WriteFile(out, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", out, len(shot))
}

// TestStatusPageSession: the login form sets an HttpOnly, SameSite=Strict
// session cookie (not the token) that reads the admin API but changes
// nothing; a wrong token, a cross-site post or a token in the URL sets
// none; logging out clears it.
func TestStatusPageSession(t *testing.T) {
	cfg := regexp.MustCompile(`(?m)^redis: .*\n`).ReplaceAllString(strings.Replace(statusPageConfig, "algorithm: gcra, ", "", 1), "")
	g := startGateway(t, "gw", writePressureConfig(t, cfg))
	adm := g.adminBase(t)
	jar, _ := cookiejar.New(nil)
	noFollow := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c := &http.Client{Jar: jar, CheckRedirect: noFollow}
	post := func(path string, form url.Values, origin string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", adm+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	get := func(method, path string) int {
		t.Helper()
		req, _ := http.NewRequest(method, adm+path, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get("GET", "/admin/status"); code != http.StatusUnauthorized {
		t.Fatalf("/admin/status without a session: %d, want 401", code)
	}
	resp := post("/admin/login", url.Values{"token": {"wrong"}}, "")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/status?login=failed" || len(resp.Cookies()) != 0 {
		t.Errorf("wrong token: got %d to %q with cookies %v, want 303 to /status?login=failed and no cookie", resp.StatusCode, resp.Header.Get("Location"), resp.Cookies())
	}
	if resp := post("/admin/login", url.Values{"token": {"st4tus-t0ken-7e2a91c05f3b8d4a6c1e"}}, "http://evil.example"); resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
		t.Errorf("cross-site login: got %d with %v, want 403 and no cookie", resp.StatusCode, resp.Cookies())
	}
	if resp := post("/admin/login?token=st4tus-t0ken-7e2a91c05f3b8d4a6c1e", url.Values{"token": {"st4tus-t0ken-7e2a91c05f3b8d4a6c1e"}}, ""); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("token in the URL: got %d, want 400", resp.StatusCode)
	}
	resp = post("/admin/login", url.Values{"token": {"st4tus-t0ken-7e2a91c05f3b8d4a6c1e"}}, strings.TrimSuffix(adm, "/"))
	ck := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || len(ck) != 1 {
		t.Fatalf("login: got %d with %v, want 303 and one cookie", resp.StatusCode, ck)
	}
	if k := ck[0]; !k.HttpOnly || k.SameSite != http.SameSiteStrictMode || k.Secure || strings.Contains(k.Value, "st4tus-t0ken-7e2a91c05f3b8d4a6c1e") || k.MaxAge <= 0 {
		t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict, not Secure on plain HTTP, never the token, with a lifetime", k)
	}
	for _, p := range []string{"/admin/status", "/admin/top", "/admin/config", "/metrics"} {
		if code := get("GET", p); code != http.StatusOK {
			t.Errorf("GET %s with the session: %d, want 200", p, code)
		}
	}
	if code := get("POST", "/admin/reload"); code != http.StatusUnauthorized {
		t.Errorf("POST /admin/reload with the session only: %d, want 401 (changes need the header)", code)
	}
	if code := get("DELETE", "/admin/keys?policy=per-ip&key=127.0.0.1/32"); code != http.StatusUnauthorized {
		t.Errorf("DELETE /admin/keys with the session only: %d, want 401", code)
	}
	post("/admin/logout", nil, "")
	if code := get("GET", "/admin/status"); code != http.StatusUnauthorized {
		t.Errorf("/admin/status after logout: %d, want 401", code)
	}
}
