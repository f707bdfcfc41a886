package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/yaml"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/metrics"
)

// exported returns every series name the gateway's registry exports, with
// a histogram's _bucket, _sum and _count, from a registry in which every
// collector has something to show.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	m := metrics.New()
	m.Request("r", metrics.OutcomeAllowed)
	m.Policy("r", "p", metrics.OutcomeLimited)
	m.Decision(metrics.BackendRedis, time.Millisecond)
	m.Upstream("r", 200, time.Millisecond)
	m.InFlight(0)
	m.LLMCharge("t", "m", 1, 1)
	m.Reload(true)
	m.ConfigLoaded([32]byte{1}, time.Now())
	m.WatchRedis(func() metrics.RedisStats { return metrics.RedisStats{} })
	m.WatchLocal(func() limiter.LocalStats { return limiter.LocalStats{} })
	m.WatchTransport(func() metrics.TransportStats { return metrics.TransportStats{} })
	m.TokenReasons([]string{"unknown_kid"})
	m.WatchCertificates(func() []metrics.Certificate { return []metrics.Certificate{{File: "tls.crt", NotAfter: time.Now()}} })
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range fams {
		names[f.GetName()] = true
		if f.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[f.GetName()+s] = true
			}
		}
	}
	return names
}

// metricName finds the metric names in a PromQL expression: the gateway's,
// the Go runtime's and the process's. Label names and functions do not
// start with these prefixes.
var metricName = regexp.MustCompile(`\b(?:gateway|go|process|promhttp)_[a-zA-Z0-9_]+`)

// checkNames fails for every metric expr names that the gateway does not
// export, and returns the names it found.
func checkNames(t *testing.T, where, expr string, have map[string]bool) []string {
	t.Helper()
	found := metricName.FindAllString(expr, -1)
	for _, n := range found {
		if !have[n] {
			t.Errorf("%s: %s names %q, which the gateway does not export", where, expr, n)
		}
	}
	return found
}

// TestGrafanaDashboardNamesExportedMetrics: every query of every panel
// names only metrics the gateway exports, and the dashboard has the panels
// an operator looks for.
func TestGrafanaDashboardNamesExportedMetrics(t *testing.T) {
	data, err := os.ReadFile("grafana/gateway.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Query any `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("grafana/gateway.json: %v", err)
	}
	have := exported(t)
	var titles []string
	used := map[string]bool{}
	for _, p := range dash.Panels {
		titles = append(titles, p.Title)
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			names := checkNames(t, "panel "+p.Title, q.Expr, have)
			if len(names) == 0 {
				t.Errorf("panel %q: query %q names no gateway metric", p.Title, q.Expr)
			}
			for _, n := range names {
				used[n] = true
			}
		}
	}
	for _, v := range dash.Templating.List {
		if s, ok := v.Query.(string); ok {
			checkNames(t, "variable", s, have)
		}
	}
	for _, want := range []string{"gateway_requests_total", "gateway_decision_duration_seconds_bucket", "gateway_redis_breaker_open",
		"gateway_redis_errors_total", "gateway_llm_tokens_total", "gateway_llm_cost_usd_total", "gateway_config_info"} {
		if !used[want] {
			t.Errorf("no panel shows %s", want)
		}
	}
	t.Logf("%d panels: %s", len(titles), strings.Join(titles, "; "))
}

// rules is a Prometheus rule file, decoded strictly.
type rules struct {
	Groups []struct {
		Name     string `json:"name"`
		Interval string `json:"interval,omitempty"`
		Rules    []struct {
			Alert       string            `json:"alert,omitempty"`
			Record      string            `json:"record,omitempty"`
			Expr        string            `json:"expr"`
			For         string            `json:"for,omitempty"`
			Labels      map[string]string `json:"labels,omitempty"`
			Annotations map[string]string `json:"annotations,omitempty"`
		} `json:"rules"`
	} `json:"groups"`
}

// TestPrometheusAlertsNameExportedMetrics: the rule file decodes strictly,
// every alert names only exported metrics, and the alerts cover what the
// docs/operating.md says to watch; and promtool (Debian's prometheus
// package) checks the file.
func TestPrometheusAlertsNameExportedMetrics(t *testing.T) {
	const file = "prometheus/gateway-rules.yaml"
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var rf rules
	if err := yaml.UnmarshalStrict(data, &rf); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	have := exported(t)
	var alerts []string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Annotations["summary"] == "" {
				t.Errorf("%s: rule %+v: want an alert, an expr and a summary", g.Name, r)
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("%s: for: %v", r.Alert, err)
				}
			}
			checkNames(t, r.Alert, r.Expr, have)
			alerts = append(alerts, r.Alert+": "+r.Expr)
		}
	}
	all := strings.Join(alerts, "\n")
	for _, watch := range []string{`outcome="failed_open"`, "gateway_redis_breaker_open", `gateway_config_reloads_total{result="failure"}`, "count by (hash) (gateway_config_info)", `gateway_admin_auth_failures_total{result="throttled"}`} {
		if !strings.Contains(all, watch) {
			t.Errorf("no alert on %s", watch)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found on PATH: make test installs Debian's prometheus package as root (or: apt-get install -y --no-install-recommends prometheus)")
	}
	out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput()
	if err != nil || !slices.Contains(strings.Fields(string(out)), "SUCCESS:") {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
}
