package policies

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// builtinPrefix selects an upstream the gateway serves itself.
const builtinPrefix = "builtin:"

var errUpstreamForm = errors.New(`must be http(s)://host or builtin:NAME`)

// Placeholders maps each of names to a placeholder URL
// (http://builtin.NAME.invalid): the Builtins of a load that checks a
// configuration without starting the built-in upstreams.
func Placeholders(names []string) map[string]*url.URL {
	m := make(map[string]*url.URL, len(names))
	for _, name := range names {
		m[name] = placeholder(name)
	}
	return m
}

func placeholder(name string) *url.URL {
	return &url.URL{Scheme: "http", Host: "builtin." + name + ".invalid"}
}

// resolveUpstream parses a route's upstream. Built-in names resolve through
// builtins; with nil builtins every name resolves to a placeholder (this
// package does not know which upstreams the binary ships: cmd says, through
// Placeholders or the started ones).
func resolveUpstream(s string, builtins map[string]*url.URL) (*url.URL, error) {
	if name, ok := strings.CutPrefix(s, builtinPrefix); ok {
		if builtins == nil {
			return placeholder(name), nil
		}
		u, ok := builtins[name]
		if !ok || u == nil {
			known := make([]string, 0, len(builtins))
			for n := range builtins {
				known = append(known, n)
			}
			slices.Sort(known)
			return nil, fmt.Errorf("unknown builtin upstream %q (known: %s)", name, strings.Join(known, ", "))
		}
		clone := *u
		return &clone, nil
	}
	if s == "" {
		return nil, errors.New("required (http(s)://host or builtin:NAME)")
	}
	u, err := url.Parse(s)
	// A rejected URL is echoed redacted: it may carry a password or token.
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("%w, got %q", errUpstreamForm, RedactURL(s))
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("must not have a query or fragment, got %q", RedactURL(s))
	}
	return u, nil
}
