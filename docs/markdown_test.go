package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// root is the repository, seen from this package's folder.
const root = ".."

// page is one Markdown file, split into the parts the checks read.
type page struct {
	path  string // relative to the repository
	lines []line
}

// line is one line of a page, and where it stands.
type line struct {
	n     int    // 1-based
	text  string // as written
	fence string // the info string of the fenced block it is in ("sh", ""), or "-" outside one
}

func (l line) inFence() bool { return l.fence != "-" }

// pages reads README.md, docs/*.md and bench's Markdown files.
func pages(t *testing.T) []page {
	t.Helper()
	paths := []string{"README.md"}
	for _, glob := range []string{"docs/*.md", "bench/*.md", "bench/results/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, glob))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m {
			rel, _ := filepath.Rel(root, p)
			paths = append(paths, filepath.ToSlash(rel))
		}
	}
	var out []page
	for _, p := range paths {
		out = append(out, readPage(t, p))
	}
	return out
}

// docPages are the pages whose commands and keys are checked: the README and docs/.
func docPages(t *testing.T) []page {
	var out []page
	for _, p := range pages(t) {
		if p.path == "README.md" || strings.HasPrefix(p.path, "docs/") {
			out = append(out, p)
		}
	}
	return out
}

func readPage(t *testing.T, path string) page {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(path)))
	if err != nil {
		t.Fatal(err)
	}
	p := page{path: path}
	fence := "-"
	for i, text := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(text, "```") {
			if fence == "-" {
				fence = strings.TrimSpace(strings.TrimPrefix(text, "```"))
			} else {
				fence = "-"
			}
			continue
		}
		p.lines = append(p.lines, line{n: i + 1, text: text, fence: fence})
	}
	return p
}

var codeSpan = regexp.MustCompile("``([^`]+)``|`([^`]+)`")

// spans returns the inline code spans of a line outside fenced blocks.
func spans(l line) []string {
	if l.inFence() {
		return nil
	}
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(l.text, -1) {
		out = append(out, strings.TrimSpace(m[1]+m[2]))
	}
	return out
}

// prose is the line without its code spans, for finding links.
func prose(l line) string { return codeSpan.ReplaceAllString(l.text, "") }

var heading = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)

// anchors returns the anchors GitHub gives the page's headings: lower
// case, punctuation dropped, spaces as "-", "-1", "-2"… for repeats.
func (p page) anchors() map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range p.lines {
		if l.inFence() {
			continue
		}
		m := heading.FindStringSubmatch(l.text)
		if m == nil {
			continue
		}
		a := anchor(m[2])
		if n, ok := seen[a]; ok {
			seen[a] = n + 1
			a += "-" + strconv.Itoa(n+1)
		} else {
			seen[a] = 0
		}
		out[a] = true
	}
	return out
}

func anchor(title string) string {
	title = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(title, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
