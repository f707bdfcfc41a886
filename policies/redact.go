package policies

import "strings"

// redacted stands in for what RedactURL removes.
const redacted = "REDACTED"

// RedactURL returns the URL s as it may be echoed (in an error, a log line,
// the output of check or explain): user info and every query value and
// fragment replaced by REDACTED, the scheme, host, path and query names
// kept. It works on text, so that a URL that does not parse, which is what
// errors echo, is redacted too.
func RedactURL(s string) string {
	prefix, rest := "", s
	if i := strings.Index(s, "://"); i >= 0 {
		prefix, rest = s[:i+3], s[i+3:]
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		authority = redacted + "@" + authority[at+1:]
	}
	fragment := ""
	if h := strings.IndexByte(tail, '#'); h >= 0 {
		tail, fragment = tail[:h], "#"+redacted
	}
	if q := strings.IndexByte(tail, '?'); q >= 0 {
		tail = tail[:q+1] + redactQuery(tail[q+1:])
	}
	return prefix + authority + tail + fragment
}

// redactQuery keeps the names of a query's pairs and replaces their values;
// a pair without "=" may be a token on its own and is replaced whole.
func redactQuery(q string) string {
	if q == "" {
		return ""
	}
	var b strings.Builder
	for i, pair := range strings.FieldsFunc(q, func(r rune) bool { return r == '&' || r == ';' }) {
		if i > 0 {
			b.WriteByte('&')
		}
		name, _, hasValue := strings.Cut(pair, "=")
		if !hasValue {
			b.WriteString(redacted)
			continue
		}
		b.WriteString(name)
		b.WriteString("=" + redacted)
	}
	return b.String()
}
