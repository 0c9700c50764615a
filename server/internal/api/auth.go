package api

import (
	"crypto/subtle"
	"strings"
)

// BearerOK reports whether an Authorization value carries token as a bearer
// credential. The scheme is matched case-insensitively (RFC 9110 §11.1), the
// token in constant time; surrounding spaces are ignored.
func BearerOK(header, token string) bool {
	scheme, cred, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(cred)), []byte(token)) == 1
}
