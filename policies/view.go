package policies

import (
	"net/url"
	"reflect"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// Redacted renders v, a configuration value (a Config or any part of it),
// as it may be shown: a mapping keyed as the file spells it, durations as
// the file writes them ("30s"), zero values other than false left out, and
// a section left out whole when nothing in it is set. Secrets are left out
// by one rule, marked with a redact tag where the config declares them:
//
//   - redact:"set" shows only whether the value is set, as <key>_set;
//   - redact:"url" shows a URL or address, or a list of them, without user
//     info, query or fragment;
//   - redact:"values" shows a map's keys, each value as REDACTED (a value
//     of "" or "*", which asks only for presence, is shown as it is);
//   - redact:"omit" leaves the value out (its keys are secret).
//
// A secret added to the config is shown until it is marked; the policies
// tests check that every field named like a credential is.
func Redacted(v any) any { return redactedValue(reflect.ValueOf(v)) }

func redactedValue(v reflect.Value) any {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	switch {
	case v.Type() == durationType:
		return limiter.ShortDuration(time.Duration(v.Int()))
	case v.Kind() == reflect.Struct:
		if v.IsZero() {
			return nil
		}
		out := map[string]any{}
		for i := range v.NumField() {
			f, fv := v.Type().Field(i), v.Field(i)
			key, rule := f.Tag.Get("koanf"), f.Tag.Get("redact")
			if key == "" || fv.IsZero() && fv.Kind() != reflect.Bool && rule != "set" {
				continue
			}
			switch rule {
			case "set":
				out[key+"_set"] = !fv.IsZero()
			case "url":
				out[key] = shownURLs(fv)
			case "values":
				out[key] = redactedValues(fv)
			case "omit":
			default: // "none" too: a setting named like a credential that holds none
				if r := redactedValue(fv); r != nil {
					out[key] = r
				}
			}
		}
		return out
	case v.Kind() == reflect.Map:
		out := make(map[string]any, v.Len())
		for it := v.MapRange(); it.Next(); {
			out[it.Key().String()] = redactedValue(it.Value())
		}
		return out
	case v.Kind() == reflect.Slice:
		out := make([]any, v.Len())
		for i := range out {
			out[i] = redactedValue(v.Index(i))
		}
		return out
	}
	return v.Interface()
}

// redactedValues is a map of strings with every value that is more than
// "present" ("" or "*") replaced by REDACTED.
func redactedValues(v reflect.Value) map[string]string {
	out := make(map[string]string, v.Len())
	for it := v.MapRange(); it.Next(); {
		val := it.Value().String()
		if val != "" && val != "*" {
			val = redacted
		}
		out[it.Key().String()] = val
	}
	return out
}

// shownURLs applies ShownURL to a string or to each of a list of strings.
func shownURLs(v reflect.Value) any {
	if v.Kind() == reflect.String {
		return ShownURL(v.String())
	}
	out := make([]string, v.Len())
	for i := range out {
		out[i] = ShownURL(v.Index(i).String())
	}
	return out
}

// ShownURL renders a URL or an address ("host:port", "redis://...",
// "builtin:echo") without user info, query or fragment. A URL that does not
// parse is not shown at all.
func ShownURL(s string) string {
	if !strings.Contains(s, "://") {
		if at := strings.LastIndexByte(s, '@'); at >= 0 {
			return s[at+1:] // "user:pass@host:port" is no valid address, but never show it
		}
		return s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable address, not shown)"
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	return u.String()
}
