package policies

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strings"
)

// MaxKeyPartBytes bounds one part of a key. A longer value (a header or query
// parameter chosen by the client) is replaced by a fixed-length digest, so
// bucket maps and Redis keys stay bounded whatever clients send.
const MaxKeyPartBytes = 256

// Bytes that mark key structure. Neither can appear inside a part as used:
// a value containing the separator, or starting with the digest marker, is
// itself replaced by its digest, so distinct values never join to the same
// key.
const (
	keySeparator = "\x1f" // between the parts of a composite key
	digestMarker = "\x1e" // starts a part that is a digest of the value
)

type keySource int

const (
	sourceIP keySource = iota
	sourceHeader
	sourceQuery
	sourceAPIKey
	sourceTenant
	sourceModel
	sourceClaim
	sourceCert // name: one of certFields
)

type keyPart struct {
	source keySource
	name   string   // header (canonical) or query parameter name; claim path as written
	path   []string // a claim's path
}

// parseKeySpec reads "ip", "header:NAME", "query:NAME", "api_key", "tenant",
// "model" or several of them joined with "+".
func parseKeySpec(spec string) ([]keyPart, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, fmt.Errorf("required (ip, header:NAME, query:NAME, claim:NAME, api_key, tenant, model, or several joined with +)")
	}
	var parts []keyPart
	for _, raw := range strings.Split(spec, "+") {
		item := strings.TrimSpace(raw)
		kind, name, hasName := strings.Cut(item, ":")
		switch strings.ToLower(kind) {
		case "ip", "api_key", "tenant", "model":
			if hasName {
				return nil, fmt.Errorf("%q takes no name", item)
			}
			parts = append(parts, keyPart{source: map[string]keySource{"ip": sourceIP, "api_key": sourceAPIKey, "tenant": sourceTenant, "model": sourceModel}[strings.ToLower(kind)]})
		case "header":
			if !isToken(name) {
				return nil, fmt.Errorf("%q needs a header name (header:X-User)", item)
			}
			parts = append(parts, keyPart{source: sourceHeader, name: http.CanonicalHeaderKey(name)})
		case "claim":
			path, err := ParseClaimPath(name)
			if err != nil || path == nil {
				return nil, fmt.Errorf("%q needs a claim path (claim:sub, claim:org.id): %v", item, err)
			}
			parts = append(parts, keyPart{source: sourceClaim, name: name, path: path})
		case "query":
			if name == "" {
				return nil, fmt.Errorf("%q needs a parameter name (query:user)", item)
			}
			parts = append(parts, keyPart{source: sourceQuery, name: name})
		case "cert":
			field := strings.ToLower(name)
			if _, ok := certFields[field]; !ok {
				return nil, fmt.Errorf("%q: want cert:subject, cert:san:dns or cert:san:uri", item)
			}
			parts = append(parts, keyPart{source: sourceCert, name: field})
		case "":
			return nil, fmt.Errorf("empty part in %q", spec)
		default:
			msg := fmt.Sprintf("unknown key source %q (want ip, header:NAME, query:NAME, claim:NAME, cert:FIELD, api_key, tenant or model)", item)
			if s := suggest(kind, []string{"ip", "header", "query", "claim", "cert", "api_key", "tenant", "model"}); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			}
			return nil, fmt.Errorf("%s", msg)
		}
	}
	return parts, nil
}

// KeyReads is what a policy's key reads from a request.
type KeyReads struct {
	IP     bool
	APIKey bool // the API key itself (api_key)
	Tenant bool // the tenant of a known API key
	Model  bool // the model an LLM call asks for (llm routes)
	// Headers are the canonical names of header:NAME parts.
	Headers []string
	// Queries are the names of query:NAME parts.
	Queries []string
	// Claims are the paths, as written, of claim:NAME parts (a verified
	// JWT's claims).
	Claims []string
	// Cert: a cert:* part reads the verified client certificate.
	Cert bool
}

// readsOf says what parsed key parts read; compile stores it in the Policy
// so that the request path never parses a key spec.
func readsOf(parts []keyPart) KeyReads {
	var kr KeyReads
	for _, part := range parts {
		switch part.source {
		case sourceIP:
			kr.IP = true
		case sourceAPIKey:
			kr.APIKey = true
		case sourceTenant:
			kr.Tenant = true
		case sourceModel:
			kr.Model = true
		case sourceHeader:
			kr.Headers = append(kr.Headers, part.name)
		case sourceQuery:
			kr.Queries = append(kr.Queries, part.name)
		case sourceClaim:
			kr.Claims = append(kr.Claims, part.name)
		case sourceCert:
			kr.Cert = true
		}
	}
	return kr
}

// keyFunc builds the KeyFunc of parsed parts. A composite key is missing when
// any of its parts is.
func keyFunc(parts []keyPart) KeyFunc {
	if len(parts) == 1 {
		p := parts[0]
		return func(r *http.Request, s *Subject) (string, bool) {
			v, ok := p.value(r, s)
			if !ok {
				return "", false
			}
			return boundPart(v), true
		}
	}
	return func(r *http.Request, s *Subject) (string, bool) {
		var b strings.Builder
		for i, p := range parts {
			v, ok := p.value(r, s)
			if !ok {
				return "", false
			}
			if i > 0 {
				b.WriteString(keySeparator)
			}
			b.WriteString(boundPart(v))
		}
		return b.String(), true
	}
}

func (p keyPart) value(r *http.Request, s *Subject) (string, bool) {
	switch p.source {
	case sourceIP:
		if s == nil {
			return "", false
		}
		return s.clientKeyPart()
	case sourceHeader:
		if r != nil {
			if v := r.Header.Get(p.name); v != "" {
				return v, true
			}
		}
	case sourceQuery:
		if r != nil && r.URL != nil {
			if v := queryValue(r.URL.RawQuery, p.name); v != "" {
				return v, true
			}
		}
	case sourceAPIKey:
		// The key itself never becomes a bucket or Redis key: bucket keys show
		// up in logs, explain output and Redis, and the digest identifies the
		// caller just as well.
		if s != nil && s.APIKey != "" {
			return APIKeyPart(s.APIKey), true
		}
	case sourceTenant:
		if s != nil && s.Tenant != nil && s.Tenant.Name != "" {
			return s.Tenant.Name, true
		}
	case sourceModel:
		if s != nil && s.Model != "" {
			return s.Model, true
		}
	case sourceClaim:
		if s != nil {
			return ClaimValue(s.Claims, p.path)
		}
	case sourceCert:
		return certValue(r, p.name)
	}
	return "", false
}

// APIKeyPart is what an api_key part of a key holds for an API key: its
// SHA-256 in lower-case hex, 64 digits.
func APIKeyPart(apiKey string) string {
	sum := sha256.Sum256([]byte(apiKey))
	return hex.EncodeToString(sum[:])
}

// IsAPIKeyPart reports whether s has the form APIKeyPart gives.
func IsAPIKeyPart(s string) bool {
	return len(s) == 2*sha256.Size && strings.Trim(s, "0123456789abcdef") == ""
}

// boundPart returns v unchanged when it is short and cannot be confused with
// key structure, and its digest otherwise.
func boundPart(v string) string {
	if len(v) <= MaxKeyPartBytes && !strings.Contains(v, keySeparator) && !strings.HasPrefix(v, digestMarker) {
		return v
	}
	return digestPart(v)
}

func digestPart(v string) string {
	sum := sha256.Sum256([]byte(v))
	return digestMarker + hex.EncodeToString(sum[:])
}

// queryValue returns the first value of name in a raw query, without
// building the whole url.Values map for every request.
func queryValue(raw, name string) string {
	for v := range queryValues(raw, name) {
		return v
	}
	return ""
}

// QueryCount counts the values of name in a raw query, read as a query:NAME
// key reads them. The proxy refuses a request that carries a key parameter
// twice: it could be judged on one value and served on another.
func QueryCount(raw, name string) int {
	n := 0
	for range queryValues(raw, name) {
		n++
	}
	return n
}

// queryValues yields the decoded values of name in a raw query, in order,
// skipping pairs that do not decode.
func queryValues(raw, name string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for raw != "" {
			var pair string
			pair, raw, _ = strings.Cut(raw, "&")
			k, v, _ := strings.Cut(pair, "=")
			if strings.ContainsAny(k, "%+") {
				var err error
				if k, err = url.QueryUnescape(k); err != nil {
					continue
				}
			}
			if k != name {
				continue
			}
			if strings.ContainsAny(v, "%+") {
				uv, err := url.QueryUnescape(v)
				if err != nil {
					continue
				}
				v = uv
			}
			if !yield(v) {
				return
			}
		}
	}
}

// isToken reports whether s is a valid HTTP token (header names, methods).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			continue
		}
		if !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

// identifiesTenant reports whether a key built from parts tells tenants
// apart: it has a tenant or api_key part (an API key belongs to one tenant).
func identifiesTenant(parts []keyPart) bool {
	for _, p := range parts {
		if p.source == sourceTenant || p.source == sourceAPIKey {
			return true
		}
	}
	return false
}
