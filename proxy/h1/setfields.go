package h1

import (
	"bytes"
	"net/http"
	"strings"

	"github.com/ratelimit-gateway/gateway/internal/httpfield"
)

// fieldNameOK reports whether SetFields can set a field of name: a name
// net/http writes (a token), and none the server reads from the header map
// as it writes the header (framing, Connection, Date, Trailer and
// trailers, Upgrade, Content-Type, Content-Encoding). It reads the
// canonical names, as net/http does: a field under another spelling is
// written as any other.
func fieldNameOK(name string) bool { return httpfield.ValidName(name) && !readByServer(name) }

// SetFields sets header fields on a lean response before its header is
// written, as w.Header()[names[i].String()] = []string{value i} would, value
// i being values[ends[i-1]:ends[i]] (from 0 for the first): the bytes
// written are net/http's for that header. The fields are kept apart from
// the header map, in the connection's buffers, so that a handler which
// renders a handful of values of its own (a gateway's rate-limit headers, on
// every answer) spends neither a map's inserts and growth nor an
// allocation on them; w.Header() does not show them.
//
// It reports false, and sets nothing, where the map has to take them: w is
// not a lean response (nor wraps one through Unwrap), its header was
// written, a name is not one it can set (see fieldNameOK), or ends are out
// of order or past values. Set under a name w.Header() holds, a field replaces it; the header
// map's value wins over a field set before it under the same name, as a
// later Header().Set would (a later Header().Add replaces it too, rather than
// adding to it).
func SetFields(w http.ResponseWriter, names []string, ends []int, values []byte) bool {
	rw := responseOf(w)
	if rw == nil {
		return false
	}
	return rw.SetFields(names, ends, values)
}

// SetFields is the package's SetFields on w itself: a handler that sees
// only net/http's types finds it through a small interface of its own.
func (rw *response) SetFields(names []string, ends []int, values []byte) bool {
	if rw.wroteHeader || len(names) != len(ends) {
		return false
	}
	c := rw.c
	start, checked := 0, true
	for i, n := range names {
		if ends[i] < start || ends[i] > len(values) {
			return false
		}
		// A handler sets the same names answer after answer, nearly
		// always from one place: a name checked before on this
		// connection, at the same index, is checked once (comparing a
		// string with itself compares no bytes).
		if i >= len(c.setNames) || c.setNames[i] != n {
			if !fieldNameOK(n) {
				return false
			}
			checked = false
		}
		start = ends[i]
	}
	if !checked && len(names) <= maxKeptFields {
		c.setNames = append(c.setNames[:0], names...)
	}
	if !rw.setUsed {
		rw.setUsed = true
		c.set, c.setValues = c.set[:0], c.setValues[:0]
	}
	// Values without line breaks (nearly all) need only their ends
	// checked as they are written: two vectorized scans here.
	breaks := bytes.IndexByte(values, '\r') >= 0 || bytes.IndexByte(values, '\n') >= 0
	start = 0
	for i, n := range names {
		end := ends[i]
		if len(rw.header) > 0 {
			delete(rw.header, n)
		}
		at := len(c.setValues)
		c.setValues = append(c.setValues, values[start:end]...)
		c.set = insertSet(c.set, setField{name: n, start: at, end: len(c.setValues), breaks: breaks})
		start = end
	}
	return true
}

// setField is a field SetFields set: its value is c.setValues[start:end],
// which may hold line breaks where breaks is set.
type setField struct {
	name       string
	start, end int
	breaks     bool
}

// insertSet puts f in set, which is sorted by name, replacing a field of
// the same name: appended, then moved down to its place (none, for names
// set in order).
func insertSet(set []setField, f setField) []setField {
	i := len(set)
	for i > 0 && f.name <= set[i-1].name {
		if f.name == set[i-1].name {
			set[i-1] = f
			return set
		}
		i--
	}
	set = append(set, f)
	if i < len(set)-1 {
		copy(set[i+1:], set[i:len(set)-1])
		set[i] = f
	}
	return set
}

// responseOf is the lean response w is or wraps, nil for none.
func responseOf(w http.ResponseWriter) *response {
	for {
		switch x := w.(type) {
		case *response:
			return x
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return nil
		}
	}
}

// readByServer reports whether WriteHeader reads name from the header map
// (or writes it itself), so that it cannot be set apart from it.
func readByServer(name string) bool {
	switch name {
	case "Content-Length", "Content-Type", "Content-Encoding", "Transfer-Encoding",
		"Connection", "Date", "Trailer", "Upgrade":
		return true
	}
	return strings.HasPrefix(name, http.TrailerPrefix)
}
