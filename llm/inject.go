package llm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// WithIncludeUsage makes a streaming chat completions or completions
// request ask for the usage chunk: it sets stream_options.include_usage to
// true, adding the field or the object when missing, and leaves every other
// byte of body as it was (the document is not re-marshalled, so key order,
// spacing and number spellings reach the upstream untouched). added reports
// whether it changed anything: when true, the client had not asked for
// usage and must not see the usage-only chunk (see StreamConfig). A request
// that does not stream, or already asks for usage, is returned as is. Only
// chat completions and completions take stream_options; the caller decides
// the kind. Errors wrap ErrInvalidRequest: body is not a JSON object, or
// stream, stream_options or include_usage has the wrong type. out never
// aliases body when added is true.
func WithIncludeUsage(body []byte) (out []byte, added bool, err error) {
	if err := requireObject(body); err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	if !validJSON(body) {
		return nil, false, fmt.Errorf("%w: not valid JSON", ErrInvalidRequest)
	}
	top := members(body, bytes.IndexByte(body, '{'))
	stream, hasStream := last(top, "stream")
	if !hasStream {
		return body, false, nil
	}
	switch v := string(body[stream.val:stream.end]); v {
	case "true":
	case "false", "null":
		return body, false, nil
	default:
		return nil, false, fmt.Errorf("%w: stream must be a boolean, got %s", ErrInvalidRequest, v)
	}
	opts, hasOpts := last(top, "stream_options")
	if !hasOpts {
		// After the last member's value, before any space and the closing
		// brace: {"stream":true,"stream_options":{"include_usage":true}\n}
		at := top[len(top)-1].end
		return splice(body, at, at, `,"stream_options":{"include_usage":true}`), true, nil
	}
	switch body[opts.val] {
	case 'n': // null
		return splice(body, opts.val, opts.end, `{"include_usage":true}`), true, nil
	case '{':
	default:
		return nil, false, fmt.Errorf("%w: stream_options must be an object, got %s", ErrInvalidRequest, body[opts.val:opts.end])
	}
	inner := members(body, opts.val)
	iu, has := last(inner, "include_usage")
	if !has {
		if len(inner) == 0 {
			return splice(body, opts.val+1, opts.val+1, `"include_usage":true`), true, nil
		}
		at := inner[len(inner)-1].end
		return splice(body, at, at, `,"include_usage":true`), true, nil
	}
	switch v := string(body[iu.val:iu.end]); v {
	case "true":
		return body, false, nil
	case "false", "null":
		return splice(body, iu.val, iu.end, "true"), true, nil
	default:
		return nil, false, fmt.Errorf("%w: stream_options.include_usage must be a boolean, got %s", ErrInvalidRequest, v)
	}
}

// splice returns a new slice: b with b[from:to] replaced by s.
func splice(b []byte, from, to int, s string) []byte {
	out := make([]byte, 0, len(b)-(to-from)+len(s))
	out = append(out, b[:from]...)
	out = append(out, s...)
	return append(out, b[to:]...)
}

// member locates one key/value pair of a JSON object in its document.
type member struct {
	key      []byte // unquoted; within the document unless it had escapes
	val, end int    // the value is b[val:end]
}

// last returns the last member named key: like encoding/json and most
// parsers upstream, a repeated key means its last value.
func last(ms []member, key string) (member, bool) {
	for i := len(ms) - 1; i >= 0; i-- {
		if string(ms[i].key) == key {
			return ms[i], true
		}
	}
	return member{}, false
}

// members lists the members of the object that starts at b[open]. b must be valid JSON (checked by
// the caller), which keeps this scanner small: it only skips values.
func members(b []byte, open int) []member {
	return appendMembers(make([]member, 0, 8), b, open)
}

// appendMembers is members appending to ms: a caller that lists the
// members of every request passes a buffer on its stack.
func appendMembers(ms []member, b []byte, open int) []member {
	i := skipSpace(b, open+1)
	for b[i] != '}' {
		keyEnd := skipString(b, i)
		key := unquote(b[i:keyEnd])
		i = skipSpace(b, keyEnd)
		i = skipSpace(b, i+1) // the colon
		valEnd := skipValue(b, i)
		ms = append(ms, member{key: key, val: i, end: valEnd})
		i = skipSpace(b, valEnd)
		if b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	return ms
}

func unquote(q []byte) []byte {
	if bytes.IndexByte(q, '\\') < 0 {
		return q[1 : len(q)-1]
	}
	var s string
	if err := json.Unmarshal(q, &s); err != nil {
		return nil // unreachable for valid JSON
	}
	return []byte(s)
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the offset just past the string starting at b[i].
//
// A prompt's text is one string of up to megabytes, which a call's walk
// skips several times (its members, its messages, their numbers), so the
// quotes and backslashes are found with bytes.IndexByte rather than byte by
// byte. Each byte is searched at most once for each: a quote found stays
// the one to reach while escapes before it are stepped over.
func skipString(b []byte, i int) int {
	i++
	q := -1 // the first quote at or after i, once searched for
	for i < len(b) {
		if q < i {
			if q = bytes.IndexByte(b[i:], '"'); q < 0 {
				break // no closing quote: the loop below walks to the end
			}
			q += i
		}
		e := bytes.IndexByte(b[i:q], '\\')
		if e < 0 {
			return q + 1
		}
		i += e + 2 // past the backslash and what it escapes
	}
	for ; i < len(b); i++ {
		if b[i] == '\\' {
			i++
		}
	}
	return i
}

// skipValue returns the offset just past the value starting at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return i
	default: // number, true, false, null
		for i < len(b) && !isDelim(b[i]) {
			i++
		}
		return i
	}
}

func isDelim(c byte) bool {
	switch c {
	case ',', '}', ']', ' ', '\t', '\r', '\n':
		return true
	}
	return false
}

// WithOutputCap gives a request without an output cap the one it was
// reserved for: it sets field (Request.CapField) to n, adding the member
// after the last one or replacing a null, and leaves every other byte of
// body as it was. A body whose field already holds a value is returned as
// is. Errors wrap ErrInvalidRequest: body is not a JSON object. out never
// aliases body when it differs from it.
func WithOutputCap(body []byte, field string, n int64) ([]byte, error) {
	return setCap(body, field, n, false)
}

// SetOutputCap sets field to n whatever it held, as WithOutputCap adds it:
// a chat request's smaller cap is raised to the one reserved (see
// Request.OtherCap).
func SetOutputCap(body []byte, field string, n int64) ([]byte, error) {
	return setCap(body, field, n, true)
}

func setCap(body []byte, field string, n int64, replace bool) ([]byte, error) {
	if err := requireObject(body); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	if !validJSON(body) {
		return nil, fmt.Errorf("%w: not valid JSON", ErrInvalidRequest)
	}
	open := bytes.IndexByte(body, '{')
	top := members(body, open)
	value := strconv.FormatInt(n, 10)
	if m, ok := last(top, field); ok {
		if !replace && string(body[m.val:m.end]) != "null" {
			return body, nil
		}
		return splice(body, m.val, m.end, value), nil
	}
	member := strconv.Quote(field) + ":" + value
	if len(top) == 0 {
		return splice(body, open+1, open+1, member), nil
	}
	at := top[len(top)-1].end
	return splice(body, at, at, ","+member), nil
}
