package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestNamedTestsExist: every test, benchmark, fuzz target or example the
// pages name (the Guarantees table names one for every claim) is a
// function of a _test.go file of the repository.
func TestNamedTestsExist(t *testing.T) {
	funcs := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz|Example)\w*)\(`)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git" || d.Name() == "test-output") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllStringSubmatch(string(b), -1) {
			funcs[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`^((?:Test|Benchmark|Fuzz|Example)[A-Z]\w*)(/\S+)?$`)
	n := 0
	for _, p := range docPages(t) {
		for _, l := range p.lines {
			for _, s := range spans(l) {
				m := name.FindStringSubmatch(s)
				if m == nil {
					continue
				}
				n++
				if !funcs[m[1]] {
					t.Errorf("%s:%d: names %s, which no _test.go file declares", p.path, l.n, m[1])
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no test named in the pages: the reader is broken")
	}
	t.Logf("%d names of tests checked", n)
}
