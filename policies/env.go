package policies

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// envOverlay applies GATEWAY_ variables on top of the file's settings.
//
// Names are resolved against the Config schema rather than by replacing "_"
// with ".", because keys themselves contain underscores
// (GATEWAY_SERVER_TRUSTED_PROXIES is server.trusted_proxies). At a struct the
// next tokens must spell a field's key; at a map (policies.<name>) they must
// spell an existing entry, compared case-insensitively with "-" and "." read
// as "_"; at a list of mappings (routes) the next token is an index of an
// existing entry. Scalar lists take comma-separated values.
type envOverlay struct {
	source string
	probs  *problems
	// places maps each place set from the environment to its variable.
	places map[string]string
}

// envStep is one step of a resolved path: a key of a mapping, or an index.
type envStep struct {
	key   string
	index int // -1 for a key step
}

type envTarget struct {
	steps []envStep
	typ   reflect.Type
}

var durationType = reflect.TypeFor[time.Duration]()

// merge is a koanf merge function: src holds the raw variables (name ->
// value), dest the configuration read so far. Problems are recorded rather
// than returned so that they are reported along with the file's own.
func (o *envOverlay) merge(src, dest map[string]any) error {
	names := make([]string, 0, len(src))
	for name := range src {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		value, _ := src[name].(string)
		o.apply(name, value, dest)
	}
	return nil
}

func (o *envOverlay) apply(name, value string, dest map[string]any) {
	tokens := strings.Split(strings.ToLower(strings.TrimPrefix(name, EnvPrefix)), "_")
	var settable, sections []envTarget
	for _, t := range resolveEnv(tokens, reflect.TypeFor[Config](), dest) {
		if isEnvLeaf(t.typ) {
			settable = append(settable, t)
		} else {
			sections = append(sections, t)
		}
	}
	envErr := func(msg string) {
		o.probs.list = append(o.probs.list, &FieldError{File: "environment", Place: name, Message: msg})
	}
	// A variable that names no setting is reported but not fatal: the
	// prefix is not ours alone (Kubernetes sets GATEWAY_PORT,
	// GATEWAY_SERVICE_HOST, ... for a Service named "gateway").
	envWarn := func(msg string) {
		o.probs.warnings = append(o.probs.warnings, &FieldError{File: "environment", Place: name, Message: msg})
	}
	switch {
	case len(settable) > 1:
		places := make([]string, len(settable))
		for i, t := range settable {
			places[i] = stepsPlace(t.steps)
		}
		sort.Strings(places)
		envErr("ambiguous: could set " + strings.Join(places, " or "))
		return
	case len(settable) == 0 && len(sections) > 0:
		envWarn(stepsPlace(sections[0].steps) + " is a section, not a single setting; ignored (set one of its keys)")
		return
	case len(settable) == 0:
		envWarn("matches no setting, ignored (policies, routes and tenant keys must exist in the file to be overridden)")
		return
	}
	target := settable[0]
	place := stepsPlace(target.steps)
	if err := setPath(dest, target.steps, envValue(target.typ, value)); err != nil {
		envErr(fmt.Sprintf("cannot set %s: %v", place, err))
		return
	}
	o.places[place] = name
}

// resolveEnv returns every way tokens can spell a path below a value of type
// t whose current content is data.
func resolveEnv(tokens []string, t reflect.Type, data any) []envTarget {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if len(tokens) == 0 {
		return []envTarget{{typ: t}}
	}
	var out []envTarget
	prepend := func(step envStep, subs []envTarget) {
		for _, s := range subs {
			s.steps = append([]envStep{step}, s.steps...)
			out = append(out, s)
		}
	}
	switch {
	case t == durationType:
		return nil
	case t.Kind() == reflect.Struct:
		m, _ := data.(map[string]any)
		for i := range t.NumField() {
			f := t.Field(i)
			key := f.Tag.Get("koanf")
			if key == "" {
				continue
			}
			n, ok := hasTokenPrefix(tokens, strings.Split(key, "_"))
			if !ok {
				continue
			}
			prepend(envStep{key: key, index: -1}, resolveEnv(tokens[n:], f.Type, m[key]))
		}
	case t.Kind() == reflect.Map:
		m, _ := data.(map[string]any)
		for key, v := range m {
			n, ok := hasTokenPrefix(tokens, envTokens(key))
			if !ok {
				continue
			}
			prepend(envStep{key: key, index: -1}, resolveEnv(tokens[n:], t.Elem(), v))
		}
	case t.Kind() == reflect.Slice && !isScalar(t.Elem()):
		list, _ := data.([]any)
		i, err := strconv.Atoi(tokens[0])
		if err != nil || i < 0 || i >= len(list) || strconv.Itoa(i) != tokens[0] {
			return nil
		}
		prepend(envStep{index: i}, resolveEnv(tokens[1:], t.Elem(), list[i]))
	}
	return out
}

// envTokens spells a map key the way an environment variable name can.
func envTokens(key string) []string {
	key = strings.ToLower(strings.NewReplacer("-", "_", ".", "_").Replace(key))
	return strings.Split(key, "_")
}

func hasTokenPrefix(tokens, prefix []string) (int, bool) {
	if len(prefix) > len(tokens) {
		return 0, false
	}
	for i, p := range prefix {
		if tokens[i] != p {
			return 0, false
		}
	}
	return len(prefix), true
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
	switch {
	case t.Kind() == reflect.Slice:
		out := []any{}
		for _, part := range strings.Split(s, ",") {
			if part = strings.TrimSpace(part); part != "" {
				out = append(out, envValue(t.Elem(), part))
			}
		}
		return out
	case t == durationType:
		return strings.TrimSpace(s)
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err == nil {
			return int(n)
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64); err == nil {
			return n
		}
	case reflect.Float32, reflect.Float64:
		if f, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil {
			return f
		}
	case reflect.Bool:
		if b, err := strconv.ParseBool(strings.TrimSpace(s)); err == nil {
			return b
		}
	}
	return s
}

// setPath stores v at steps below m, creating missing sections (a file
// without "server:" can still get GATEWAY_SERVER_LISTEN).
func setPath(m map[string]any, steps []envStep, v any) error {
	var cur any = m
	for i, st := range steps {
		last := i == len(steps)-1
		if st.index >= 0 {
			list, ok := cur.([]any)
			if !ok || st.index >= len(list) {
				return fmt.Errorf("%s is not a list", stepsPlace(steps[:i]))
			}
			if last {
				list[st.index] = v
				return nil
			}
			if list[st.index] == nil {
				list[st.index] = map[string]any{}
			}
			cur = list[st.index]
			continue
		}
		mp, ok := cur.(map[string]any)
		if !ok {
			return fmt.Errorf("%s is not a mapping", stepsPlace(steps[:i]))
		}
		if last {
			mp[st.key] = v
			return nil
		}
		if mp[st.key] == nil {
			mp[st.key] = map[string]any{}
		}
		cur = mp[st.key]
	}
	return nil
}

func stepsPlace(steps []envStep) string {
	place := ""
	for _, st := range steps {
		if st.index >= 0 {
			place = indexPlace(place, st.index)
		} else {
			place = keyPlace(place, st.key)
		}
	}
	return place
}

func keyPlace(place, key string) string {
	if place == "" {
		return key
	}
	if place == "tenants.keys" {
		key = keyEntryPlace(key)
	}
	return place + "." + key
}

func indexPlace(place string, i int) string { return place + "[" + strconv.Itoa(i) + "]" }
