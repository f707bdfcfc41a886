package policies

import (
	"encoding"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

var (
	durationType    = reflect.TypeFor[time.Duration]()
	unmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// checkStrict walks the raw configuration (as koanf holds it after the file
// and the environment) against the Config schema given by the koanf struct
// tags. It reports every unknown key and every value of the wrong type with
// its place, so that decoding afterwards cannot fail on input it has seen.
// Unknown keys leave the rest decodable, so validation still runs and its
// findings are reported along with them; a type error stops before decoding.
func checkStrict(p *problems, raw map[string]any) {
	checkValue(p, "", raw, reflect.TypeFor[Config]())
}

func checkValue(p *problems, place string, v any, t reflect.Type) {
	if v == nil {
		return // an empty YAML value leaves the field at its zero value
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == durationType {
		checkDuration(p, place, v)
		return
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		checkText(p, place, v, t)
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			p.typeErrorf(place, "must be a mapping, not %s", describe(v))
			return
		}
		fields := structFields(t)
		// Known keys in the order Config declares them, which is the order
		// validation reports in; unknown ones after them.
		keys := sortedKeys(m)
		sort.SliceStable(keys, func(i, j int) bool {
			return fieldOrder(fields, keys[i]) < fieldOrder(fields, keys[j])
		})
		for _, key := range keys {
			f, ok := fields[key]
			if !ok {
				p.add(keyPlace(place, key), unknownKeyMessage(key, fields))
				continue
			}
			checkValue(p, keyPlace(place, key), m[key], f.Type)
		}
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			p.typeErrorf(place, "must be a mapping, not %s", describe(v))
			return
		}
		for _, key := range sortedKeys(m) {
			checkValue(p, keyPlace(place, key), m[key], t.Elem())
		}
	case reflect.Slice:
		list, ok := v.([]any)
		if !ok {
			p.typeErrorf(place, "must be a list, not %s", describe(v))
			return
		}
		for i, item := range list {
			checkValue(p, indexPlace(place, i), item, t.Elem())
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			p.typeErrorf(place, "must be a string, not %s (quote it)", describe(v))
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			p.typeErrorf(place, "must be true or false, not %s", describe(v))
		}
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Int16, reflect.Int8:
		if _, ok := asInteger(v); !ok {
			p.typeErrorf(place, "must be an integer, not %s", describe(v))
		}
	case reflect.Float64, reflect.Float32:
		if _, ok := asFloat(v); !ok {
			p.typeErrorf(place, "must be a number, not %s", describe(v))
		}
	default:
		p.typeErrorf(place, "unsupported setting type %s", t)
	}
}

// checkText reads a string through t's UnmarshalText (a closed list of
// names: see enums.go), which says what is wrong with it.
func checkText(p *problems, place string, v any, t reflect.Type) {
	s, ok := v.(string)
	if !ok {
		p.typeErrorf(place, "must be a string, not %s (quote it)", describe(v))
		return
	}
	if err := reflect.New(t).Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)); err != nil {
		p.typeErrorf(place, "%s", err)
	}
}

func checkDuration(p *problems, place string, v any) {
	if s, ok := v.(string); ok {
		if _, err := time.ParseDuration(s); err != nil {
			if _, numErr := strconv.ParseFloat(s, 64); numErr == nil {
				p.typeErrorf(place, "must be a duration with a unit, like \"1s\" or \"500ms\" (got %s)", s)
				return
			}
			p.typeErrorf(place, "invalid duration %q (use a number with a unit: 500ms, 1s, 1m, 1h)", s)
		}
		return
	}
	if isZeroNumber(v) {
		return
	}
	if _, ok := asFloat(v); ok {
		p.typeErrorf(place, "must be a duration with a unit, like \"1s\" or \"500ms\" (got %v)", v)
		return
	}
	p.typeErrorf(place, "must be a duration like \"1s\" or \"500ms\", not %s", describe(v))
}

// structFields maps koanf keys to the fields of t.
func structFields(t reflect.Type) map[string]reflect.StructField {
	out := make(map[string]reflect.StructField, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if key := f.Tag.Get("koanf"); key != "" && key != "-" {
			out[key] = f
		}
	}
	return out
}

func fieldOrder(fields map[string]reflect.StructField, key string) int {
	if f, ok := fields[key]; ok {
		return f.Index[0]
	}
	return len(fields)
}

func unknownKeyMessage(key string, fields map[string]reflect.StructField) string {
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	sort.Strings(names)
	if best := suggest(key, names); best != "" {
		return fmt.Sprintf("unknown key (did you mean %q?)", best)
	}
	return "unknown key (known: " + strings.Join(names, ", ") + ")"
}

// suggest returns the candidate closest to s by edit distance, if it is
// close enough to be a plausible typo.
func suggest(s string, candidates []string) string {
	best, bestDist := "", math.MaxInt
	lower := strings.ToLower(s)
	for _, c := range candidates {
		// "master" for "master_name": a truncated key is a typo too.
		if len(lower) >= 3 && strings.HasPrefix(c, lower) {
			return c
		}
		if d := editDistance(lower, c); d < bestDist {
			best, bestDist = c, d
		}
	}
	if bestDist <= max(1, min(3, len(s)/3)) {
		return best
	}
	return ""
}

// editDistance is the Levenshtein distance between a and b in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// asInteger accepts YAML integers and floats with an integral value that
// fits in an int64 (YAML reads 1e3 as a float).
func asInteger(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int64:
		return n, true
	case int32:
		return int64(n), true
	case uint64:
		if n <= math.MaxInt64 {
			return int64(n), true
		}
	case float64:
		if n == math.Trunc(n) && n >= math.MinInt64 && n < math.MaxInt64 {
			return int64(n), true
		}
	}
	return 0, false
}

func asFloat(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case float32:
		return float64(n), true
	}
	if i, ok := asInteger(v); ok {
		return float64(i), true
	}
	return 0, false
}

func isZeroNumber(v any) bool {
	f, ok := asFloat(v)
	return ok && f == 0
}

// describe renders a value for a message: its text for scalars, its kind for
// collections.
func describe(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", x)
	case bool:
		return fmt.Sprintf("%t", x)
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	}
	if f, ok := asFloat(v); ok {
		return fmt.Sprint(f)
	}
	return fmt.Sprintf("%T", v)
}
