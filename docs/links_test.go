package docs

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// link matches a Markdown link or image: [text](target) or ![alt](target).
var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestRelativeLinksResolve: every relative link of the README, docs/ and
// bench/ points at a file of the repository, and at one of its headings
// when it names an anchor.
func TestRelativeLinksResolve(t *testing.T) {
	all := pages(t)
	byPath := map[string]page{}
	for _, p := range all {
		byPath[p.path] = p
	}
	anchorsOf := func(file string) map[string]bool {
		p, ok := byPath[file]
		if !ok {
			p = readPage(t, file)
			byPath[file] = p
		}
		return p.anchors()
	}
	checked := 0
	for _, p := range all {
		for _, l := range p.lines {
			if l.inFence() {
				continue
			}
			for _, m := range link.FindAllStringSubmatch(prose(l), -1) {
				target := m[1]
				if regexp.MustCompile(`^[a-z][a-z0-9+.-]*:`).MatchString(target) {
					continue // http:, https:, mailto:
				}
				checked++
				file, frag, _ := strings.Cut(target, "#")
				dest := p.path
				if file != "" {
					dest = path.Clean(path.Join(path.Dir(p.path), file))
				}
				if strings.HasPrefix(dest, "../") {
					t.Errorf("%s:%d: %s leaves the repository", p.path, l.n, target)
					continue
				}
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(dest))); err != nil {
					t.Errorf("%s:%d: %s: no such file %s", p.path, l.n, target, dest)
					continue
				}
				if frag == "" {
					continue
				}
				if !strings.HasSuffix(dest, ".md") {
					t.Errorf("%s:%d: %s: an anchor in a file that is not Markdown", p.path, l.n, target)
					continue
				}
				if !anchorsOf(dest)[frag] {
					t.Errorf("%s:%d: %s: %s has no heading #%s", p.path, l.n, target, dest, frag)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: the page reader is broken")
	}
}

func TestAnchorsAreGitHubs(t *testing.T) {
	for _, c := range []struct{ title, want string }{
		{"`/admin/top`", "admintop"},
		{"Redis locks (library)", "redis-locks-library"},
		{"Path parameters (`;`)", "path-parameters-"},
		{"Responses: rate-limit headers and errors", "responses-rate-limit-headers-and-errors"},
		{`What makes two requests "the same"`, "what-makes-two-requests-the-same"},
		{"Upstream connections (with `server.upstream_transport: lean`, the default)", "upstream-connections-with-serverupstream_transport-lean-the-default"},
	} {
		if got := anchor(c.title); got != c.want {
			t.Errorf("anchor(%q) = %q, want %q", c.title, got, c.want)
		}
	}
}
