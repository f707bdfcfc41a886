package policies

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/knadh/koanf/providers/env/v2"
)

// envDelim separates the steps of the keys envOverlay hands koanf's env
// provider. No variable name can hold it, so no step that a variable can
// name holds it either, and policy names may contain ".".
const envDelim = "\x00"

// envOverlay resolves GATEWAY_ variables for koanf's env provider: its
// transform turns each variable into a key path and a typed value, which
// mergeEnv lays over the file's settings.
//
// Names are resolved against the Config schema rather than by replacing "_"
// with ".", because keys themselves contain underscores
// (GATEWAY_SERVER_TRUSTED_PROXIES is server.trusted_proxies). Every setting
// the file can hold is spelled as a variable would name it, lower-cased:
// struct keys as written, the entries of a map (policies.<name>) that the file
// has with "-" and "." written as "_", the entries of a list of mappings
// (routes) by index. A variable must spell exactly one setting. Scalar lists
// take comma-separated values.
type envOverlay struct {
	probs *problems
	file  map[string]any // the file's settings, which name map entries and list indices
	// settings and sections hold the targets of each spelling, built on
	// the first variable.
	settings, sections map[string][]envTarget
	// places maps each place set from the environment to its variable.
	places map[string]string
}

// envTarget is a setting, or a section of settings, that a variable can name.
type envTarget struct {
	path  []string // keys and list indices, as koanf holds them
	place string   // as errors name it: policies.per-ip.rate, routes[1].upstream
	typ   reflect.Type
	// blocked is the place on the way that the file holds as something
	// other than a mapping; the setting cannot be made there.
	blocked string
}

func newEnvOverlay(probs *problems, file map[string]any) *envOverlay {
	return &envOverlay{probs: probs, file: file, places: map[string]string{}}
}

// provider reads environ's GATEWAY_ variables, ordered by name so that
// warnings come in a stable order and the last of a repeated setting wins.
func (o *envOverlay) provider(environ []string) *env.Env {
	sorted := slices.Clone(environ)
	slices.SortStableFunc(sorted, func(a, b string) int {
		an, _, _ := strings.Cut(a, "=")
		bn, _, _ := strings.Cut(b, "=")
		return strings.Compare(an, bn)
	})
	return env.Provider(envDelim, env.Opt{
		Prefix:        EnvPrefix,
		TransformFunc: o.transform,
		EnvironFunc:   func() []string { return sorted },
	})
}

// transform resolves one variable. Problems are recorded rather than
// returned so that they are reported along with the file's own; a variable
// that sets nothing is dropped by returning "".
func (o *envOverlay) transform(name, value string) (string, any) {
	if o.settings == nil {
		o.settings, o.sections = map[string][]envTarget{}, map[string][]envTarget{}
		o.index("", envTarget{typ: reflect.TypeFor[Config]()}, o.file)
	}
	spelled := strings.ToLower(strings.TrimPrefix(name, EnvPrefix))
	targets := o.settings[spelled]
	// A variable that names no setting is reported but not fatal: the
	// prefix is not ours alone (Kubernetes sets GATEWAY_PORT,
	// GATEWAY_SERVICE_HOST, ... for a Service named "gateway").
	warn := func(msg string) {
		o.probs.warnings = append(o.probs.warnings, &FieldError{File: "environment", Place: name, Message: msg})
	}
	fail := func(msg string) {
		o.probs.list = append(o.probs.list, &FieldError{File: "environment", Place: name, Message: msg})
	}
	switch {
	case len(targets) > 1:
		places := make([]string, len(targets))
		for i, t := range targets {
			places[i] = t.place
		}
		slices.Sort(places)
		fail("ambiguous: could set " + strings.Join(places, " or "))
		return "", nil
	case len(targets) == 0 && len(o.sections[spelled]) > 0:
		warn(o.sections[spelled][0].place + " is a section, not a single setting; ignored (set one of its keys)")
		return "", nil
	case len(targets) == 0:
		warn("matches no setting, ignored (policies, routes and tenant keys must exist in the file to be overridden)")
		return "", nil
	}
	t := targets[0]
	if t.blocked != "" {
		fail(fmt.Sprintf("cannot set %s: %s is not a mapping", t.place, t.blocked))
		return "", nil
	}
	o.places[t.place] = name
	return strings.Join(t.path, envDelim), envValue(t.typ, value)
}

// index records every target below t, whose content in the file is data,
// under its spelling.
func (o *envOverlay) index(spelled string, t envTarget, data any) {
	for t.typ.Kind() == reflect.Pointer {
		t.typ = t.typ.Elem()
	}
	if isEnvLeaf(t.typ) {
		o.settings[spelled] = append(o.settings[spelled], t)
		return
	}
	if spelled != "" {
		o.sections[spelled] = append(o.sections[spelled], t)
	}
	step := func(key, spelling, place string, typ reflect.Type, data any) {
		if spelled != "" {
			spelling = spelled + "_" + spelling
		}
		next := t
		next.path, next.place, next.typ = append(slices.Clip(t.path), key), place, typ
		o.index(spelling, next, data)
	}
	switch t.typ.Kind() {
	case reflect.Struct:
		m, isMap := data.(map[string]any)
		if data != nil && !isMap && t.blocked == "" {
			t.blocked = t.place
		}
		for i := range t.typ.NumField() {
			f := t.typ.Field(i)
			if key := f.Tag.Get("koanf"); key != "" {
				step(key, key, keyPlace(t.place, key), f.Type, m[key])
			}
		}
	case reflect.Map:
		m, _ := data.(map[string]any)
		for _, key := range sortedKeys(m) {
			if !strings.Contains(key, envDelim) {
				spelling := strings.ToLower(strings.NewReplacer("-", "_", ".", "_").Replace(key))
				step(key, spelling, keyPlace(t.place, key), t.typ.Elem(), m[key])
			}
		}
	case reflect.Slice:
		list, _ := data.([]any)
		for i, item := range list {
			step(strconv.Itoa(i), strconv.Itoa(i), indexPlace(t.place, i), t.typ.Elem(), item)
		}
	}
}

// mergeEnv is koanf's merge that also steps into lists: a variable sets one
// field of one route, where koanf's maps.Merge would replace the whole list
// with a map keyed by index.
func mergeEnv(src, dest map[string]any) error {
	for key, v := range src {
		dest[key] = mergeEnvValue(dest[key], v)
	}
	return nil
}

func mergeEnvValue(dest, src any) any {
	sub, ok := src.(map[string]any)
	if !ok {
		return src
	}
	switch d := dest.(type) {
	case map[string]any:
		_ = mergeEnv(sub, d)
		return d
	case []any:
		for key, v := range sub {
			if i, err := strconv.Atoi(key); err == nil && i >= 0 && i < len(d) {
				d[i] = mergeEnvValue(d[i], v)
			}
		}
		return d
	}
	return src // a section the file does not have
}

func isScalar(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

// isEnvLeaf reports whether one variable can set a value of type t.
func isEnvLeaf(t reflect.Type) bool {
	return isScalar(t) || (t.Kind() == reflect.Slice && isScalar(t.Elem()))
}

// envValue converts a variable's text to what YAML would have produced for
// the field, so the strict check and validation treat it like file content.
// Text that does not convert is passed on as a string, and the strict check
// then reports it with its place and variable.
func envValue(t reflect.Type, s string) any {
	if t.Kind() == reflect.Slice {
		out := []any{}
		for _, part := range strings.Split(s, ",") {
			if part = strings.TrimSpace(part); part != "" {
				out = append(out, envValue(t.Elem(), part))
			}
		}
		return out
	}
	trimmed := strings.TrimSpace(s)
	var v any
	var err error
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if t == durationType {
			return trimmed
		}
		var n int64
		n, err = strconv.ParseInt(trimmed, 10, 64)
		v = int(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v, err = strconv.ParseUint(trimmed, 10, 64)
	case reflect.Float32, reflect.Float64:
		v, err = strconv.ParseFloat(trimmed, 64)
	case reflect.Bool:
		v, err = strconv.ParseBool(trimmed)
	default:
		return s
	}
	if err != nil {
		return s
	}
	return v
}
