package h1

import (
	"bytes"
	"io"
	"net/http"
	"sync"
	"testing"
)

// setOrMap sets fields (name, value pairs) with SetFields, or on the header
// map where SetFields says it cannot (a name it cannot set among them), and
// records which it was.
func setOrMap(w http.ResponseWriter, took *tally, fields ...string) {
	var names []string
	var ends []int
	var values []byte
	for i := 0; i < len(fields); i += 2 {
		names = append(names, fields[i])
		values = append(values, fields[i+1]...)
		ends = append(ends, len(values))
	}
	if SetFields(w, names, ends, values) {
		took.add(true)
		return
	}
	took.add(false)
	for i := 0; i < len(fields); i += 2 {
		w.Header()[fields[i]] = []string{fields[i+1]}
	}
}

// tally counts what setOrMap did.
type tally struct {
	mu        sync.Mutex
	set, maps int
}

func (t *tally) add(set bool) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if set {
		t.set++
	} else {
		t.maps++
	}
}

func (t *tally) take() (set, maps int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	set, maps = t.set, t.maps
	t.set, t.maps = 0, 0
	return set, maps
}

// unwrapper wraps a ResponseWriter as a handler's middleware does.
type unwrapper struct{ http.ResponseWriter }

func (u unwrapper) Unwrap() http.ResponseWriter { return u.ResponseWriter }

// setFieldsHandler answers by path, each answer a way to use SetFields;
// took, when not nil, records where the fields went.
func setFieldsHandler(took *tally) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/set", func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Server", "upstream")
		h.Set("X-Ratelimit-Limit", "the upstream's, replaced")
		h.Set("Content-Type", "text/plain")
		setOrMap(w, took,
			"Ratelimit-Policy", `"p";q=10;w=1`,
			"Ratelimit", `"p";r=9;t=1`,
			"X-Ratelimit-Limit", "10",
			"A-First", "first",
			"Zz-Last", "set, then the map's",
			"X-Split", "a\r\nSet-Cookie: evil=1",
			"X-Padded", "  padded\t",
			"X-Empty", "",
			"Ratelimit", `"p";r=8;t=1`, // the later of a name twice
		)
		setOrMap(w, took, "Server-Timing", "gw;dur=1", "A-First", "set again")
		h.Set("Zz-Last", "the map's")
		io.WriteString(w, "body")
	})
	mux.HandleFunc("/bad-name", func(w http.ResponseWriter, r *http.Request) {
		setOrMap(w, took, "X-A", "a", "Bad Name", "dropped")
		io.WriteString(w, "x")
	})
	mux.HandleFunc("/framing", func(w http.ResponseWriter, r *http.Request) {
		setOrMap(w, took, "X-A", "a", "Content-Type", "application/json")
		io.WriteString(w, "{}")
	})
	mux.HandleFunc("/trailer-name", func(w http.ResponseWriter, r *http.Request) {
		setOrMap(w, took, http.TrailerPrefix+"X-Sum", "1")
		io.WriteString(w, "x")
	})
	mux.HandleFunc("/late", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		setOrMap(w, took, "X-Late", "not sent")
		io.WriteString(w, "x")
	})
	mux.HandleFunc("/hints", func(w http.ResponseWriter, r *http.Request) {
		setOrMap(w, took, "Link", "</a.css>; rel=preload", "X-Both", "in both answers")
		w.WriteHeader(http.StatusEarlyHints)
		io.WriteString(w, "after hints")
	})
	mux.HandleFunc("/notmodified", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Etag", `"x"`)
		setOrMap(w, took, "X-Ratelimit-Remaining", "3")
		w.WriteHeader(http.StatusNotModified)
	})
	mux.HandleFunc("/wrapped", func(w http.ResponseWriter, r *http.Request) {
		setOrMap(unwrapper{w}, took, "X-Wrapped", "yes")
		io.WriteString(w, "x")
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		var fields []string
		for i := range 80 {
			fields = append(fields, "X-F"+string(rune('A'+i%26))+string(rune('a'+i/26)), string(bytes.Repeat([]byte{'v'}, 100)))
		}
		setOrMap(w, took, fields...)
		io.WriteString(w, "x")
	})
	return mux
}

// TestSetFieldsAsHeaderMap: each answer that sets fields with SetFields on
// the lean server is, byte for byte (Date aside), net/http's answer where
// the same fields were set on the header map; and SetFields took the fields
// where it should, and only there.
func TestSetFieldsAsHeaderMap(t *testing.T) {
	var took tally
	std := startStandard(t, setFieldsHandler(nil))
	_, lean := startServer(t, setFieldsHandler(&took), nil)
	get := func(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n" }
	for _, tc := range []struct {
		name      string
		raw       string
		set, maps int // SetFields calls that took their fields, and that left them to the map
	}{
		{"interleaved with the map's, replaced, invalid, twice", get("/set"), 2, 0},
		{"HEAD", "HEAD /set HTTP/1.1\r\nHost: x\r\n\r\n", 2, 0},
		{"kept to the next answer of the connection", get("/set") + get("/wrapped") + get("/set"), 5, 0},
		{"not a field name", get("/bad-name"), 0, 1},
		{"a name the server reads", get("/framing"), 0, 1},
		{"a trailer's name", get("/trailer-name"), 0, 1},
		{"after WriteHeader", get("/late"), 0, 1},
		{"103, then 200", get("/hints"), 1, 0},
		{"304", get("/notmodified"), 1, 0},
		{"through Unwrap", get("/wrapped"), 1, 0},
		{"80 fields of 100 bytes, then a small answer", get("/big") + get("/set"), 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := rawExchange(t, std, []byte(tc.raw))
			got := rawExchange(t, lean, []byte(tc.raw))
			if !bytes.Equal(got, want) {
				t.Errorf("lean:\n%s\nnet/http:\n%s", got, want)
			}
			if set, maps := took.take(); set != tc.set || maps != tc.maps {
				t.Errorf("SetFields took %d calls' fields and left %d to the map, want %d and %d", set, maps, tc.set, tc.maps)
			}
		})
	}
}

// TestSetFieldsRefusesBadEnds: ends out of order or past the values set
// nothing, as does a writer that is not a lean response.
func TestSetFieldsRefusesBadEnds(t *testing.T) {
	rw := &response{c: &serverConn{}, header: http.Header{"X-A": {"kept"}}}
	a, b := "X-A", "X-B"
	for _, tc := range []struct {
		name   string
		names  []string
		ends   []int
		values string
	}{
		{"ends out of order", []string{a, b}, []int{3, 1}, "abc"},
		{"past the values", []string{a}, []int{4}, "abc"},
		{"ends and names differ in number", []string{a, b}, []int{3}, "abc"},
		{"an empty name", []string{a, ""}, []int{1, 2}, "abc"},
		{"a name the server reads", []string{a, "Content-Length"}, []int{1, 2}, "abc"},
	} {
		if SetFields(rw, tc.names, tc.ends, []byte(tc.values)) {
			t.Errorf("%s: set", tc.name)
		}
	}
	if rw.setUsed || rw.header.Get("X-A") != "kept" {
		t.Errorf("a refused call changed the response: setUsed=%v X-A=%q", rw.setUsed, rw.header.Get("X-A"))
	}
	if SetFields(otherWriter{}, []string{a}, []int{1}, []byte("a")) {
		t.Error("set on a writer that is not a lean response")
	}
}

type otherWriter struct{ http.ResponseWriter }

// TestFieldNameOK: SetFields sets a token, and none of the names the
// server reads as it writes the header.
func TestFieldNameOK(t *testing.T) {
	for _, name := range []string{"X-Ratelimit-Limit", "ratelimit", "x-custom_1", "Content-Lengthy", "content-length"} {
		if !fieldNameOK(name) {
			t.Errorf("fieldNameOK(%q) = false, want true", name)
		}
	}
	for _, name := range []string{"", "Bad Name", "X:A", "Ä", "Content-Length", "Content-Type", "Content-Encoding",
		"Transfer-Encoding", "Connection", "Date", "Trailer", "Upgrade", http.TrailerPrefix + "X-Sum"} {
		if fieldNameOK(name) {
			t.Errorf("fieldNameOK(%q) = true, want false", name)
		}
	}
}

// BenchmarkHeaderBlock renders a small proxied answer's header block: three
// upstream fields in the map and a gateway's five rate-limit headers, set on
// the map (the anchor) or with SetFields.
//
//	go test -run '^$' -bench BenchmarkHeaderBlock -benchmem ./proxy/h1/
func BenchmarkHeaderBlock(b *testing.B) {
	names := []string{"Ratelimit", "Ratelimit-Policy", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"}
	var values []byte
	var ends []int
	for _, v := range []string{`"bench";r=9999999;t=1`, `"bench";q=10000000;w=1`, "10000000", "9999999", "1"} {
		values = append(values, v...)
		ends = append(ends, len(values))
	}
	keep := func(string) bool { return true }
	for _, set := range []bool{false, true} {
		name := "map"
		if set {
			name = "SetFields"
		}
		b.Run(name, func(b *testing.B) {
			c := &serverConn{}
			b.ReportAllocs()
			for b.Loop() {
				w := &response{c: c, header: make(http.Header)}
				if !set || !SetFields(w, names, ends, values) {
					all := string(values)
					vals := make([]string, len(names))
					start := 0
					for i, n := range names {
						vals[i] = all[start:ends[i]]
						start = ends[i]
						w.header[n] = vals[i : i+1 : i+1]
					}
				}
				w.header["Server"] = []string{"nginx/1.22.1"}
				w.header["Content-Length"] = []string{"2"}
				w.header["Content-Type"] = []string{"text/plain"}
				c.hdr = w.appendBlock(c.hdr[:0], keep)
				w.setUsed = false
			}
		})
	}
}
