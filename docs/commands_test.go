package docs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

var (
	binDir   string // removed by TestMain
	buildBin sync.Once
	binPath  string
	binErr   error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// gatewayBinary builds cmd/gateway once for the tests that run it.
func gatewayBinary(t *testing.T) string {
	t.Helper()
	buildBin.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "docs-gateway-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "gateway")
		build := exec.Command("go", "build", "-o", binPath, "./cmd/gateway")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build ./cmd/gateway: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// command is one simple command a page shows: its words, shell quoting
// removed, and where it is written.
type command struct {
	place string
	words []string
}

// shownCommands returns the commands the pages show to be run: every line
// of an sh block, the "$ " lines and "gateway …" synopses of a plain block,
// and code spans that start with make, go, gateway or bash.
func shownCommands(pages []page) []command {
	var out []command
	add := func(place, text string) {
		for _, words := range splitCommands(text) {
			out = append(out, command{place: place, words: words})
		}
	}
	for _, p := range pages {
		for i := 0; i < len(p.lines); i++ {
			l := p.lines[i]
			place := fmt.Sprintf("%s:%d", p.path, l.n)
			switch {
			case l.fence == "sh" || l.fence == "bash":
			case l.fence == "" && strings.HasPrefix(l.text, "$ "):
				l.text = strings.TrimPrefix(l.text, "$ ")
			case l.fence == "" && strings.HasPrefix(l.text, "gateway "):
			case l.inFence():
				continue
			default:
				for _, s := range spans(l) {
					if regexp.MustCompile(`^(make|go|gateway|bash) `).MatchString(s) {
						add(place, s)
					}
				}
				continue
			}
			text := l.text
			for strings.HasSuffix(text, `\`) && i+1 < len(p.lines) && p.lines[i+1].fence == l.fence {
				i++
				text = strings.TrimSuffix(text, `\`) + " " + p.lines[i].text
			}
			add(place, text)
		}
	}
	return out
}

// splitCommands cuts a shell line into simple commands and their words.
// It knows what the pages use: quotes, comments, ";", "&&", "||", " | ",
// " & ", redirections, "$(…)" and shell keywords; it is not a shell.
func splitCommands(text string) [][]string {
	var (
		cmds  [][]string
		words []string
		word  strings.Builder
		inW   bool
		quote rune
	)
	endWord := func() {
		if inW {
			words = append(words, word.String())
		}
		word.Reset()
		inW = false
	}
	endCmd := func() {
		endWord()
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	rs := []rune(text)
scan:
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		spaceBefore := i == 0 || rs[i-1] == ' ' || rs[i-1] == '\t'
		spaceAfter := i+1 == len(rs) || rs[i+1] == ' ' || rs[i+1] == '\t'
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				word.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inW = r, true
		case r == '#' && !inW:
			break scan
		case r == ' ' || r == '\t':
			endWord()
		case r == ';' && spaceAfter:
			endCmd()
		case (r == '&' || r == '|') && i+1 < len(rs) && rs[i+1] == r:
			endCmd()
			i++
		case (r == '|' || r == '&') && spaceBefore && spaceAfter:
			endCmd()
		default:
			word.WriteRune(r)
			inW = true
		}
	}
	endCmd()
	var out [][]string
	for _, c := range cmds {
		var kept []string
		for i := 0; i < len(c); i++ {
			w := c[i]
			switch {
			case w == ">" || w == "2>" || w == "<":
				i++ // and its file
				continue
			case strings.HasPrefix(w, ">") || strings.HasPrefix(w, "2>") || strings.HasPrefix(w, "<"):
				continue
			}
			kept = append(kept, w)
		}
		// Leading keywords and assignments are not the command.
		for len(kept) > 0 && (regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`).MatchString(kept[0]) ||
			kept[0] == "do" || kept[0] == "then" || kept[0] == "else" || kept[0] == "time") {
			kept = kept[1:]
		}
		if len(kept) > 0 {
			out = append(out, kept)
		}
	}
	return out
}

// TestShownMakeTargetsExist: every `make TARGET` the pages show is a
// target of the Makefile.
func TestShownMakeTargetsExist(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	rule := regexp.MustCompile(`^([A-Za-z0-9_.-]+(?:[ \t]+[A-Za-z0-9_.-]+)*)[ \t]*:([^=]|$)`)
	for _, l := range strings.Split(string(b), "\n") {
		if m := rule.FindStringSubmatch(l); m != nil {
			for _, name := range strings.Fields(m[1]) {
				targets[name] = true
			}
		}
	}
	n := 0
	for _, c := range shownCommands(docPages(t)) {
		if c.words[0] != "make" {
			continue
		}
		for _, w := range c.words[1:] {
			if strings.Contains(w, "=") || strings.HasPrefix(w, "-") {
				continue
			}
			n++
			if !targets[w] {
				t.Errorf("%s: make %s: the Makefile has no target %q (it has %s)", c.place, w, w, strings.Join(sortedKeys(targets), ", "))
			}
		}
	}
	if n == 0 {
		t.Fatal("no make command found in the pages: the reader is broken")
	}
}

// TestShownGoPathsExist: every ./path given to a go command, and every
// script run with bash, that the pages show exists.
func TestShownGoPathsExist(t *testing.T) {
	n := 0
	for _, c := range shownCommands(docPages(t)) {
		var paths []string
		switch c.words[0] {
		case "go":
			for _, w := range c.words[1:] {
				if strings.HasPrefix(w, "./") {
					paths = append(paths, w)
				}
			}
		case "bash":
			if len(c.words) > 1 && !strings.HasPrefix(c.words[1], "-") {
				paths = append(paths, c.words[1])
			}
		}
		for _, p := range paths {
			n++
			p = strings.TrimSuffix(strings.TrimSuffix(p, "/..."), "/")
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(p))); err != nil {
				t.Errorf("%s: %s: no such path %s", c.place, strings.Join(c.words, " "), p)
			}
		}
	}
	if n == 0 {
		t.Fatal("no go ./path found in the pages: the reader is broken")
	}
}

// TestShownGatewayCommandsAreAccepted builds the gateway and checks that
// every subcommand and flag the pages give it is one it accepts.
func TestShownGatewayCommandsAreAccepted(t *testing.T) {
	var calls []command
	for _, c := range shownCommands(docPages(t)) {
		switch {
		case c.words[0] == "gateway" || strings.HasSuffix(c.words[0], "/gateway"):
			calls = append(calls, command{c.place, c.words[1:]})
		case c.words[0] == "go" && len(c.words) > 2 && c.words[1] == "run" &&
			strings.TrimSuffix(c.words[2], "/") == "./cmd/gateway":
			calls = append(calls, command{c.place, c.words[3:]})
		}
	}
	if len(calls) == 0 {
		t.Fatal("no gateway command found in the pages: the reader is broken")
	}
	bin := gatewayBinary(t)
	flagsOf := map[string]map[string]bool{} // subcommand -> flag -> takes a value
	accepted := func(sub string) (map[string]bool, bool) {
		if f, ok := flagsOf[sub]; ok {
			return f, f != nil
		}
		var stderr bytes.Buffer
		cmd := exec.Command(bin, sub, "-h")
		cmd.Stdout, cmd.Stderr = &bytes.Buffer{}, &stderr
		_ = cmd.Run() // -h exits 2 after printing the flags
		if strings.Contains(stderr.String(), "unknown command") {
			flagsOf[sub] = nil
			return nil, false
		}
		flags := map[string]bool{}
		sc := bufio.NewScanner(&stderr)
		def := regexp.MustCompile(`^  -(\S+)(.*)$`)
		for sc.Scan() {
			if m := def.FindStringSubmatch(sc.Text()); m != nil {
				flags[m[1]] = strings.TrimSpace(m[2]) != ""
			}
		}
		flagsOf[sub] = flags
		return flags, true
	}
	for _, c := range calls {
		// A synopsis writes optional parts in brackets and repeats with "...".
		var args []string
		for _, w := range c.words {
			w = strings.TrimSuffix(strings.NewReplacer("[", "", "]", "").Replace(w), "...")
			if w != "" {
				args = append(args, w)
			}
		}
		sub := "serve"
		if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			sub, args = args[0], args[1:]
		}
		flags, ok := accepted(sub)
		if !ok {
			t.Errorf("%s: gateway %s: the gateway has no subcommand %q", c.place, sub, sub)
			continue
		}
		// Read the flags as the flag package does, up to the first argument.
		for i := 0; i < len(args); i++ {
			a := args[i]
			if !strings.HasPrefix(a, "-") || a == "-" {
				break
			}
			name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
			takes, known := flags[name]
			if !known {
				t.Errorf("%s: gateway %s -%s: the gateway's %s takes no flag -%s (it takes %s)", c.place, sub, name, sub, name, strings.Join(sortedKeys(flags), ", "))
				break
			}
			if takes && !hasValue {
				i++
			}
		}
	}
	t.Logf("%d gateway commands checked against %d subcommands", len(calls), len(flagsOf))
}

// TestSplitCommands pins the reader of shell lines on the shapes the pages use.
func TestSplitCommands(t *testing.T) {
	for _, c := range []struct {
		line string
		want string
	}{
		{`go run ./cmd/gateway check -config bad.yaml; echo "exit $?"`, `[go run ./cmd/gateway check -config bad.yaml] [echo exit $?]`},
		{`make test               # go vet + go test -race`, `[make test]`},
		{`gateway key-digest < keys.txt          # one key a line`, `[gateway key-digest]`},
		{`make bench BENCHFLAGS='-rounds 3 -duration 2s'`, `[make bench BENCHFLAGS=-rounds 3 -duration 2s]`},
		{`redis-server --port 6379 --daemonize yes && GATEWAY_REDIS_ADDRS=127.0.0.1:6379 go run ./cmd/gateway -config gateway.redis.yaml`,
			`[redis-server --port 6379 --daemonize yes] [go run ./cmd/gateway -config gateway.redis.yaml]`},
		{`gateway explain -config gateway.yaml [-o text|json] URL`, `[gateway explain -config gateway.yaml [-o text|json] URL]`},
		{`curl -s $A/healthz | jq . >/dev/null 2> err`, `[curl -s $A/healthz] [jq .]`},
		{`for i in $(seq 30); do curl -s -H 'X-API-Key: k' http://x/; done`, `[for i in $(seq 30)] [curl -s -H X-API-Key: k http://x/] [done]`},
	} {
		var got []string
		for _, w := range splitCommands(c.line) {
			got = append(got, "["+strings.Join(w, " ")+"]")
		}
		if g := strings.Join(got, " "); g != c.want {
			t.Errorf("splitCommands(%q):\n got %s\nwant %s", c.line, g, c.want)
		}
	}
}
