package policies

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/ratelimit-gateway/gateway/builtin"
)

// builtinPrefix selects an upstream the gateway serves itself.
const builtinPrefix = "builtin:"

var errUpstreamForm = errors.New(`must be http(s)://host or builtin:NAME`)

// resolveUpstream parses a route's upstream. Built-in names resolve through
// builtins; with nil builtins the shipped names resolve to placeholders so a
// configuration can be checked without starting anything.
func resolveUpstream(s string, builtins map[string]*url.URL) (*url.URL, error) {
	if name, ok := strings.CutPrefix(s, builtinPrefix); ok {
		if builtins == nil {
			if known := builtin.Names(); !slices.Contains(known, name) {
				return nil, fmt.Errorf("unknown builtin upstream %q (known: %s)", name, strings.Join(known, ", "))
			}
			return &url.URL{Scheme: "http", Host: "builtin." + name + ".invalid"}, nil
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
