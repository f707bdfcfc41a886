package policies

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// FieldError is one problem in a configuration, located by file and place.
// Place is a path like "policies.per-ip.rate" or "routes[1].policies[0]"; it
// is empty for problems with the whole file (a YAML syntax error).
type FieldError struct {
	// File is the configuration's source (the path as given, or
	// "environment" for a GATEWAY_ variable that matches no setting).
	File string
	// Place is where in the configuration the problem is.
	Place string
	// Env names the GATEWAY_ variable that set the value at Place, if any.
	Env     string
	Message string
}

// Error renders "file: place: message", naming the environment variable
// when the value came from one.
func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Place != "" {
		b.WriteString(": ")
		b.WriteString(e.Place)
	}
	if e.Env != "" {
		b.WriteString(" (from ")
		b.WriteString(e.Env)
		b.WriteString(")")
	}
	b.WriteString(": ")
	b.WriteString(e.Message)
	return b.String()
}

// ValidationError holds every problem found in one configuration, so that a
// single run of "gateway check" or one failed reload reports all of them.
type ValidationError struct {
	Errors []*FieldError
	// Warnings are the problems that alone would not have stopped the load
	// (see Snapshot.Warnings). They are carried along because one may
	// explain an error: a mistyped GATEWAY_REDIS_ADRS is a warning, and the
	// "gcra needs redis" it causes is the error.
	Warnings []*FieldError
}

// Error renders one problem per line, errors first, then each warning
// prefixed with "warning: ".
func (e *ValidationError) Error() string {
	lines := make([]string, 0, len(e.Errors)+len(e.Warnings))
	for _, fe := range e.Errors {
		lines = append(lines, fe.Error())
	}
	for _, fe := range e.Warnings {
		lines = append(lines, "warning: "+fe.Error())
	}
	return strings.Join(lines, "\n")
}

// Unwrap exposes the individual problems to errors.Is and errors.As.
func (e *ValidationError) Unwrap() []error {
	out := make([]error, len(e.Errors))
	for i, fe := range e.Errors {
		out[i] = fe
	}
	return out
}

// FieldErrors returns the problems carried by err (a *ValidationError or a
// single *FieldError, possibly wrapped), or nil.
func FieldErrors(err error) []*FieldError {
	var ve *ValidationError
	if errors.As(err, &ve) {
		return ve.Errors
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		return []*FieldError{fe}
	}
	return nil
}

// problems collects FieldErrors for one source. envPlaces maps a place to the
// GATEWAY_ variable that set it, so messages about such values name it.
type problems struct {
	file      string
	envPlaces map[string]string
	list      []*FieldError
	warnings  []*FieldError
	// typePlaces holds the places whose value had the wrong type. Decoding
	// leaves them at their zero value, so validation's words about those
	// places are dropped: the type error is the one that matters.
	typePlaces map[string]bool
}

func (p *problems) add(place, msg string) {
	p.list = append(p.list, &FieldError{File: p.file, Place: place, Env: p.envFor(place), Message: msg})
}

// envFor names the variable that set place, or the list place is an item of
// (GATEWAY_SERVER_TRUSTED_PROXIES sets every server.trusted_proxies[i]).
func (p *problems) envFor(place string) string {
	if v, ok := p.envPlaces[place]; ok {
		return v
	}
	if i := strings.LastIndexByte(place, '['); i > 0 && strings.HasSuffix(place, "]") {
		return p.envPlaces[place[:i]]
	}
	return ""
}

func (p *problems) addf(place, format string, args ...any) {
	p.add(place, fmt.Sprintf(format, args...))
}

// warnf records a problem that does not stop the load.
func (p *problems) warnf(place, format string, args ...any) {
	p.warnings = append(p.warnings, &FieldError{File: p.file, Place: place, Env: p.envFor(place), Message: fmt.Sprintf(format, args...)})
}

func (p *problems) typeErrorf(place, format string, args ...any) {
	if p.typePlaces == nil {
		p.typePlaces = map[string]bool{}
	}
	p.typePlaces[place] = true
	p.addf(place, format, args...)
}

// dropShadowed removes problems reported after first at places whose value
// had the wrong type (or below them): validation saw a zero value there.
func (p *problems) dropShadowed(first int) {
	if len(p.typePlaces) == 0 {
		return
	}
	kept := p.list[:first]
	for _, fe := range p.list[first:] {
		if !p.shadowed(fe.Place) {
			kept = append(kept, fe)
		}
	}
	p.list = kept
}

func (p *problems) shadowed(place string) bool {
	for tp := range p.typePlaces {
		if place == tp || strings.HasPrefix(place, tp+".") || strings.HasPrefix(place, tp+"[") {
			return true
		}
	}
	return false
}

func (p *problems) err() error {
	if len(p.list) == 0 {
		return nil
	}
	return &ValidationError{Errors: p.list, Warnings: p.warnings}
}

// keyPlace names key below place: policies.per-ip, and a tenant key by its
// digest, never its text.
func keyPlace(place, key string) string {
	if place == "" {
		return key
	}
	if place == "tenants.keys" {
		key = keyEntryPlace(key)
	}
	return place + "." + key
}

// indexPlace names item i of the list at place: routes[1].
func indexPlace(place string, i int) string { return place + "[" + strconv.Itoa(i) + "]" }
