// Command tripcount counts one request's trip through the proxy package:
// the files its code runs in, one after the other. It copies a tree of
// the module (default: the working tree) to a temporary directory, puts at
// the top of every function and function literal of proxy's own files a
// call that records the function's file on entry and its caller's on
// return (frames outside proxy are transparent), and serves two requests
// on loopback through proxy/h1's server and transport, as gateway serve
// does, counting the second: the first pays for what is built once.
//
//	go run ./bench/tripcount [-tree DIR] [-show [-funcs]]
//
// A stay is a run of consecutive code in one file; a return is a stay in
// a file the request had left before (stays − files). Paths: local (a GET
// through a token bucket per IP, gateway-local) and llm (an OpenAI chat
// call, gateway-llm). -show prints the files in the order the request ran
// in them; with -funcs, one stay a line with the functions it ran, to see
// which call takes the request out of a file.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func main() {
	tree := flag.String("tree", ".", "the module tree to count")
	show := flag.Bool("show", false, "print each stay")
	funcs := flag.Bool("funcs", false, "with -show, name the functions of each stay")
	flag.Parse()
	tmp, err := os.MkdirTemp("", "tripcount")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	if out, err := exec.Command("cp", "-a", *tree+"/.", tmp).CombinedOutput(); err != nil {
		log.Fatalf("copying %s: %v: %s", *tree, err, out)
	}
	if err := instrument(filepath.Join(tmp, "proxy"), *funcs); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "proxy", "zz_trip.go"), []byte(recorder), 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "proxy", "h1", "zz_trip_test.go"), []byte(tripTest), 0o644); err != nil {
		log.Fatal(err)
	}
	// -v: the counts are the test's output.
	args := []string{"test", "-count=1", "-v", "-run", "^TestTripCount$", "./proxy/h1/"}
	if *show {
		args = append(args, "-args", "-show")
		if *funcs {
			args = append(args, "-funcs")
		}
	}
	cmd := exec.Command("go", args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = tmp, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		log.Fatal(err)
	}
}

// instrument rewrites proxy's own files (not its tests, not its
// subpackages). Each function records its file, or with funcs
// "file:function" (a literal is its enclosing function's or variable's
// ".func").
func instrument(dir string, funcs bool) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return err
	}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		base := filepath.Base(path)
		mark := func(body *ast.BlockStmt, fn string) {
			if body == nil {
				return
			}
			label := base
			if funcs {
				label += ":" + fn
			}
			in := &ast.ExprStmt{X: &ast.CallExpr{Fun: ast.NewIdent("tripIn"), Args: []ast.Expr{&ast.BasicLit{Kind: token.STRING, Value: fmt.Sprintf("%q", label)}}}}
			out := &ast.DeferStmt{Call: &ast.CallExpr{Fun: ast.NewIdent("tripOut")}}
			body.List = append([]ast.Stmt{in, out}, body.List...)
		}
		for _, d := range f.Decls {
			// name: the function declared, or the first variable, whose
			// literals are name.func
			name := ""
			switch d := d.(type) {
			case *ast.FuncDecl:
				name = d.Name.Name
				if d.Recv != nil && len(d.Recv.List) == 1 {
					t := d.Recv.List[0].Type
					if star, ok := t.(*ast.StarExpr); ok {
						t = star.X
					}
					if id, ok := t.(*ast.Ident); ok {
						name = id.Name + "." + name
					}
				}
			case *ast.GenDecl:
				if len(d.Specs) > 0 {
					if v, ok := d.Specs[0].(*ast.ValueSpec); ok {
						name = v.Names[0].Name
					}
				}
			}
			ast.Inspect(d, func(n ast.Node) bool {
				switch fn := n.(type) {
				case *ast.FuncDecl:
					mark(fn.Body, name)
				case *ast.FuncLit:
					mark(fn.Body, name+".func")
				}
				return true
			})
		}
		var buf bytes.Buffer
		if err := printer.Fprint(&buf, fset, f); err != nil {
			return err
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

const recorder = `package proxy

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"
)

var trip struct {
	mu    sync.Mutex
	on    bool
	g     uint64
	stack []string
	log   []string
}

func tripGoroutine() uint64 {
	var b [64]byte
	s := b[:runtime.Stack(b[:], false)]
	s = bytes.TrimPrefix(s, []byte("goroutine "))
	n, _ := strconv.ParseUint(string(s[:bytes.IndexByte(s, ' ')]), 10, 64)
	return n
}

func tripIn(file string) {
	trip.mu.Lock()
	defer trip.mu.Unlock()
	if !trip.on {
		return
	}
	g := tripGoroutine()
	if trip.g == 0 {
		trip.g = g
	}
	if g != trip.g {
		return
	}
	trip.stack = append(trip.stack, file)
	trip.log = append(trip.log, file)
}

func tripOut() {
	trip.mu.Lock()
	defer trip.mu.Unlock()
	if !trip.on || tripGoroutine() != trip.g || len(trip.stack) == 0 {
		return
	}
	trip.stack = trip.stack[:len(trip.stack)-1]
	if len(trip.stack) > 0 {
		trip.log = append(trip.log, trip.stack[len(trip.stack)-1])
	}
}

// TripStart records the next request's trip, on the goroutine that enters
// proxy's code first.
func TripStart() {
	trip.mu.Lock()
	defer trip.mu.Unlock()
	trip.on, trip.g, trip.stack, trip.log = true, 0, nil, nil
}

// TripStop ends the record and returns the files in the order the code ran in them.
func TripStop() []string {
	trip.mu.Lock()
	defer trip.mu.Unlock()
	trip.on = false
	return trip.log
}
`

const tripTest = `package h1_test

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/metrics"
	"github.com/ratelimit-gateway/gateway/policies"
	"github.com/ratelimit-gateway/gateway/proxy"
	"github.com/ratelimit-gateway/gateway/proxy/h1"
)

var (
	show  = flag.Bool("show", false, "print each stay")
	funcs = flag.Bool("funcs", false, "the records are file:function; print each stay's functions")
)

type holder struct{ p atomic.Pointer[policies.Snapshot] }

func (h *holder) Load() *policies.Snapshot { return h.p.Load() }

const answer = ` + "`" + `{"id":"c","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Hi!"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":2,"total_tokens":14}}` + "`" + `

func TestTripCount(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, answer)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	engine, err := limiter.NewEngine(time.Now, limiter.NewLocal(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []struct{ name, cfg, method, url, body string }{
		{"local", "routes:\n  - {name: bench, match: {path_prefix: /}, upstream: UP, policies: [gateway-local]}\npolicies:\n  gateway-local: {key: ip, algorithm: token_bucket, rate: 10000000, per: 1s}\n",
			"GET", "/", ""},
		{"llm", "routes:\n  - name: bench\n    match: {path_prefix: /v1/, methods: [POST]}\n    upstream: UP\n    llm: openai\n    policies: [gateway-llm]\npolicies:\n  gateway-llm: {key: ip, cost: tokens, rate: 1000000000, per: 1s}\n",
			"POST", "/v1/chat/completions", ` + "`" + `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello there, mock!"}],"max_tokens":16}` + "`" + `},
	} {
		snap, err := policies.Parse("gateway.yaml", []byte(strings.ReplaceAll(path.cfg, "UP", up.URL)), policies.Options{})
		if err != nil {
			t.Fatal(err)
		}
		hd := &holder{}
		hd.p.Store(snap)
		tr := h1.New(h1.Config{Fallback: &http.Transport{}})
		h, err := proxy.New(proxy.Config{Snapshots: hd, Limiter: engine, Transport: tr,
			Logger: slog.New(slog.DiscardHandler), Metrics: metrics.New()})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &h1.Server{Handler: h, Fallback: &http.Server{Handler: h}}
		go srv.Serve(ln)
		client := &http.Client{}
		send := func() {
			req, _ := http.NewRequest(path.method, "http://"+ln.Addr().String()+path.url, strings.NewReader(path.body))
			if path.body == "" {
				req.Body = nil
			} else {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("%s: status %d", path.name, resp.StatusCode)
			}
		}
		send()
		proxy.TripStart()
		send()
		log := proxy.TripStop()
		srv.Close()
		var stays, ran []string // ran: with -funcs, the functions of each stay
		for _, rec := range log {
			f, fn, _ := strings.Cut(rec, ":")
			if len(stays) == 0 || stays[len(stays)-1] != f {
				stays, ran = append(stays, f), append(ran, "")
			}
			if fn != "" && !strings.HasSuffix(ran[len(ran)-1], " "+fn) {
				ran[len(ran)-1] += " " + fn
			}
		}
		entered := map[string]int{}
		for _, f := range stays {
			entered[f]++
		}
		var again []string
		for f, n := range entered {
			if n > 1 {
				again = append(again, fmt.Sprintf("%s %d", f, n))
			}
		}
		sort.Strings(again)
		fmt.Printf("%-6s %3d stays in %2d files, %3d returns to a file left before; entered more than once: %s\n",
			path.name, len(stays), len(entered), len(stays)-len(entered), strings.Join(again, ", "))
		if *show && *funcs {
			for i, f := range stays {
				fmt.Printf("  %s:%s\n", f, ran[i])
			}
		} else if *show {
			fmt.Println("  " + strings.Join(stays, " → "))
		}
	}
}
`
