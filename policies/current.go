package policies

import (
	"reflect"
	"sync/atomic"
)

// Current holds the Snapshot in force. Requests call Load once and use that
// snapshot throughout; a reload replaces it with one Store. The zero value
// holds nil. Current is safe for concurrent use.
type Current struct {
	p atomic.Pointer[Snapshot]
}

// NewCurrent returns a Current holding s.
func NewCurrent(s *Snapshot) *Current {
	c := &Current{}
	c.p.Store(s)
	return c
}

// Load returns the snapshot in force, or nil if none was stored.
func (c *Current) Load() *Snapshot { return c.p.Load() }

// Store makes s the snapshot in force.
func (c *Current) Store(s *Snapshot) { c.p.Store(s) }

// RestartRequired lists the settings that differ between old and new but take
// effect only when the process starts: every server setting except those the
// request path reads from the Snapshot (trusted_proxies, forwarded_header,
// ipv4_prefix, ipv6_prefix, path_parameters), and every redis setting. Places are like "server.listen".
func RestartRequired(old, new *Config) []string {
	if old == nil || new == nil {
		return nil
	}
	live := map[string]bool{"trusted_proxies": true, "forwarded_header": true, "ipv4_prefix": true, "ipv6_prefix": true, "path_parameters": true}
	var out []string
	out = appendChangedFields(out, "server", reflect.ValueOf(old.Server), reflect.ValueOf(new.Server), live)
	out = appendChangedFields(out, "redis", reflect.ValueOf(old.Redis), reflect.ValueOf(new.Redis), nil)
	return out
}

func appendChangedFields(out []string, section string, a, b reflect.Value, skip map[string]bool) []string {
	t := a.Type()
	for i := range t.NumField() {
		key := t.Field(i).Tag.Get("koanf")
		if skip[key] {
			continue
		}
		if !sameSetting(a.Field(i), b.Field(i)) {
			out = append(out, section+"."+key)
		}
	}
	return out
}

// sameSetting compares two values of a setting; an empty list equals an
// absent one.
func sameSetting(a, b reflect.Value) bool {
	if a.Kind() == reflect.Slice && a.Len() == 0 && b.Len() == 0 {
		return true
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}
