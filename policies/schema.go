package policies

import "reflect"

// SchemaKey is one key that gateway.yaml may hold, as Config declares it.
type SchemaKey struct {
	// Path is the key's place from the top of the file, its parts joined
	// by ".": "server.listen", "routes[].match.host", "policies.*.rate".
	// "[]" stands for any entry of a list, "*" for any entry of a map whose
	// names the file chooses (policies, prices, models, tenant keys).
	Path string
	// Section is true for a key that holds other keys (server,
	// routes[].idempotency), false for one that holds a value: a scalar, a
	// duration, a list of scalars or a map of scalars (match.headers, plans).
	Section bool
}

// Schema lists every key of Config, sections before the keys they hold,
// in declaration order. It is what the documentation is checked against:
// every key that holds a value must be documented, and nothing else may be.
func Schema() []SchemaKey {
	var out []SchemaKey
	walkSchema(reflect.TypeFor[Config](), "", &out)
	return out
}

func walkSchema(t reflect.Type, prefix string, out *[]SchemaKey) {
	for i := range t.NumField() {
		f := t.Field(i)
		name := f.Tag.Get("koanf")
		if name == "" {
			continue
		}
		path := name
		if prefix != "" {
			path = prefix + "." + name
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		// A section is a struct, or a list or map of structs, whose own
		// keys are walked below it.
		var below string
		switch {
		case ft.Kind() == reflect.Struct:
			below = path
		case ft.Kind() == reflect.Slice && derefType(ft.Elem()).Kind() == reflect.Struct:
			below, ft = path+"[]", derefType(ft.Elem())
		case ft.Kind() == reflect.Map && derefType(ft.Elem()).Kind() == reflect.Struct:
			below, ft = path+".*", derefType(ft.Elem())
		default:
			*out = append(*out, SchemaKey{Path: path})
			continue
		}
		*out = append(*out, SchemaKey{Path: path, Section: true})
		walkSchema(ft, below, out)
	}
}

func derefType(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}
