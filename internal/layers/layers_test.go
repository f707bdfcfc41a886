package layers

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/ratelimit-gateway/gateway/"

// rules lists, per package, the module packages that may not be among its
// dependencies (direct or not), or, with only, the sole ones that may.
var rules = []struct {
	pkg       string
	only      []string // when set: every module dependency must be one of these
	forbidden []string // prefixes no dependency may have
}{
	{pkg: "llm", only: []string{}},
	{pkg: "jwtauth", only: []string{}},
	{pkg: "limiter", only: []string{"limiter/internal/shardmap"}},
	{pkg: "policies", only: []string{"limiter", "limiter/internal/shardmap", "llm"}},
	{pkg: "builtin", forbidden: []string{"proxy", "policies", "limiter"}},
	{pkg: "metrics", forbidden: []string{"proxy", "limiter/redislimit", "internal/redisclient", "policies", "jwtauth"}},
	{pkg: "tracing", forbidden: []string{"proxy", "limiter/redislimit", "internal/redisclient", "policies"}},
	{pkg: "admin", forbidden: []string{"proxy", "limiter/redislimit", "internal/redisclient", "builtin", "cmd"}},
}

// deps returns the module packages pkg depends on (not its tests'),
// without the module prefix.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", module+pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	var mine []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), module); ok && p != pkg {
			mine = append(mine, p)
		}
	}
	return mine
}

func TestImportsPointOneWay(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("the go command is needed to list the packages' imports: %v", err)
	}
	for _, r := range rules {
		t.Run(r.pkg, func(t *testing.T) {
			for _, d := range deps(t, r.pkg) {
				if r.only != nil && !slices.Contains(r.only, d) {
					t.Errorf("%s depends on %s; it may depend only on %v of this module", r.pkg, d, r.only)
				}
				for _, f := range r.forbidden {
					if d == f || strings.HasPrefix(d, f+"/") {
						t.Errorf("%s depends on %s, which is above it", r.pkg, d)
					}
				}
			}
		})
	}
}

// lean is the gateway's HTTP/1.1 server and transport; known to cmd alone,
// which builds them: the handler sees an http.Handler's server and an
// http.RoundTripper.
const lean = "proxy/h1"

// TestOnlyCmdImportsLean: no package but proxy/h1 itself and cmd/...
// imports proxy/h1, in its code or its tests (a test that needs the handler
// and the lean server lives in proxy/h1 or cmd).
func TestOnlyCmdImportsLean(t *testing.T) {
	out, err := exec.Command("go", "list", "-f",
		`{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}`, module+"...").Output()
	if err != nil {
		t.Fatalf("go list %s...: %v", module, err)
	}
	seen := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		pkg, _ := strings.CutPrefix(f[0], module)
		seen++
		if pkg == lean || strings.HasPrefix(pkg, lean+"/") || pkg == "cmd" || strings.HasPrefix(pkg, "cmd/") {
			continue
		}
		if slices.Contains(f[1:], module+lean) {
			t.Errorf("%s imports %s, which only cmd may know", pkg, lean)
		}
	}
	if seen < 10 {
		t.Fatalf("go list named %d packages: the test tested nothing", seen)
	}
}
