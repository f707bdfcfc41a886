package docs

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// shownRun is a gateway command a page shows with what it printed.
type shownRun struct {
	place string
	args  []string
	exit  bool              // the line ends in `; echo "exit $?"`
	files map[string]string // written by `$ cat FILE` earlier in the block
	want  string
}

var (
	runLine  = regexp.MustCompile(`^\$ (?:go run \./cmd/gateway|gateway) (explain|check|key-digest|version)\b(.*?)(; echo "exit \$\?")?$`)
	catLine  = regexp.MustCompile(`^\$ cat ([\w.-]+)$`)
	notPlain = regexp.MustCompile(`[|<>\\]|\$\(|\$[A-Za-z]`)
)

// shownRuns finds, in plain blocks, each "$ gateway …" line that uses no
// pipe, redirection or variable, and the lines it printed up to the next
// "$ " line; a "$ cat FILE" before it in the block gives a file it reads.
func shownRuns(pages []page) []shownRun {
	var out []shownRun
	for _, p := range pages {
		files := map[string]string{}
		var cur *shownRun
		var catting string
		var printed []string
		flush := func() {
			if cur != nil && len(printed) > 0 {
				cur.want = strings.Join(printed, "\n") + "\n"
				out = append(out, *cur)
			}
			if catting != "" {
				files[catting] = strings.Join(printed, "\n") + "\n"
			}
			cur, catting, printed = nil, "", nil
		}
		inBlock := false
		for _, l := range p.lines {
			if l.fence != "" {
				if inBlock {
					flush()
					files, inBlock = map[string]string{}, false
				}
				continue
			}
			inBlock = true
			if !strings.HasPrefix(l.text, "$ ") {
				if cur != nil || catting != "" {
					printed = append(printed, l.text)
				}
				continue
			}
			flush()
			if m := catLine.FindStringSubmatch(l.text); m != nil {
				catting = m[1]
				continue
			}
			m := runLine.FindStringSubmatch(l.text)
			if m == nil || notPlain.MatchString(m[2]) {
				continue
			}
			copied := map[string]string{}
			for k, v := range files {
				copied[k] = v
			}
			words := splitCommands(m[2])
			if len(words) > 1 {
				continue // more than one command: not a plain run
			}
			args := []string{m[1]}
			if len(words) == 1 {
				args = append(args, words[0]...)
			}
			cur = &shownRun{place: fmt.Sprintf("%s:%d", p.path, l.n), args: args, exit: m[3] != "", files: copied}
		}
		flush()
	}
	return out
}

// TestShownOutputsAreWhatTheGatewayPrints runs each gateway command a page
// shows with its output, as written, beside the repository's configs, and
// compares what it prints with what the page says.
func TestShownOutputsAreWhatTheGatewayPrints(t *testing.T) {
	runs := shownRuns(docPages(t))
	if len(runs) == 0 {
		t.Fatal("no gateway command with its output found in the pages: the reader is broken")
	}
	bin := gatewayBinary(t)
	for _, r := range runs {
		dir := t.TempDir()
		for _, name := range []string{"gateway.yaml", "gateway.redis.yaml"} {
			b, err := os.ReadFile(filepath.Join(root, name))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for name, content := range r.files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command(bin, r.args...)
		cmd.Dir = dir
		cmd.Env = cleanEnv()
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		got := out.String()
		if r.exit {
			got += fmt.Sprintf("exit %d\n", cmd.ProcessState.ExitCode())
		} else if err != nil {
			t.Errorf("%s: gateway %s: %v\n%s", r.place, strings.Join(r.args, " "), err, got)
			continue
		}
		if got != r.want {
			t.Errorf("%s: gateway %s prints\n%s\nthe page says\n%s", r.place, strings.Join(r.args, " "), got, r.want)
		}
	}
	t.Logf("%d shown outputs compared", len(runs))
}

// cleanEnv is the test's environment without GATEWAY_ variables, which
// would change what the config loads to.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GATEWAY_") {
			env = append(env, kv)
		}
	}
	return env
}
