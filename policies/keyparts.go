package policies

import "strings"

// KeyParts splits a key made by a policy's KeyFunc into its parts, in the
// order of the key spec ("tenant+ip" gives the tenant, then the network).
// A part that the KeyFunc replaced by its digest (a value over
// MaxKeyPartBytes, or one that could be taken for key structure) comes back
// as "sha256:" and the digest's 64 hex digits. An api_key part is already a
// digest: the hex SHA-256 of the key. Other parts are returned as read from
// the request. It is for showing keys to people ("gateway explain"); the
// limiter takes the key whole.
func KeyParts(key string) []string {
	parts := strings.Split(key, keySeparator)
	for i, p := range parts {
		if d, ok := strings.CutPrefix(p, digestMarker); ok {
			parts[i] = "sha256:" + d
		}
	}
	return parts
}
