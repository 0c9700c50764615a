// Package auth is who may call the decision server: bearer tokens, each
// allowed some domains. The server's single token (--token-file) may use
// every domain; a tokens file (--tokens-file) names more, each with the
// domains it may check and charge, so that one tenant's client cannot spend
// another tenant's budget. Tokens are compared by their SHA-256: the file
// holds digests, never the tokens themselves.
package auth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"

	"gopkg.in/yaml.v3"
)

// BearerOK reports whether an Authorization value carries token as a bearer
// credential. The scheme is matched case-insensitively (RFC 9110 §11.1), the
// token in constant time; surrounding spaces are ignored.
func BearerOK(header, token string) bool {
	cred, ok := bearer(header)
	return ok && subtle.ConstantTimeCompare([]byte(cred), []byte(token)) == 1
}

// bearer returns the credential of a Bearer Authorization value.
func bearer(header string) (string, bool) {
	scheme, cred, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(cred), true
}

// Scope is what a token may do: the domains it may decide in. A nil Scope
// (no authentication configured) allows every domain.
type Scope struct {
	// Name names the token in logs and metrics, never the token itself.
	Name    string
	all     bool
	domains map[string]bool
}

// All is the scope of the server's single token: every domain.
var All = &Scope{Name: "token", all: true}

// Allows reports whether s may decide in domain.
func (s *Scope) Allows(domain string) bool {
	return s == nil || s.all || s.domains[domain]
}

// Unlimited reports whether s allows every domain (the single token, a
// tokens file entry with "*", or no authentication): what the paths that
// show every domain — metrics, the dashboard — require.
func (s *Scope) Unlimited() bool { return s == nil || s.all }

type scopeKey struct{}

// With returns ctx carrying s.
func With(ctx context.Context, s *Scope) context.Context {
	return context.WithValue(ctx, scopeKey{}, s)
}

// From returns the Scope ctx carries; nil when none (no authentication).
func From(ctx context.Context) *Scope {
	s, _ := ctx.Value(scopeKey{}).(*Scope)
	return s
}

// Tokens is the contents of a tokens file: scopes by their token's SHA-256.
type Tokens struct {
	byDigest map[[sha256.Size]byte]*Scope
}

// Len is the number of tokens in t.
func (t *Tokens) Len() int { return len(t.byDigest) }

// Parse reads a tokens file (file names it in errors):
//
//	tokens:
//	  - name: checkout            # in logs and metrics
//	    sha256: 9f86d081884c7d65… # hex SHA-256 of the token: printf %s "$TOKEN" | sha256sum
//	    domains: [checkout, checkout-ai]
//	  - name: platform
//	    sha256: …
//	    domains: ["*"]            # every domain
//
// Names and digests are unique; every token has at least one domain, and
// "*" stands alone. An empty list is valid: only the single token (if any)
// is accepted then.
func Parse(file string, data []byte) (*Tokens, error) {
	type entry struct {
		Name    string   `yaml:"name"`
		SHA256  string   `yaml:"sha256"`
		Domains []string `yaml:"domains"`
	}
	var doc struct {
		Tokens []entry `yaml:"tokens"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) { // io.EOF: an empty file
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	// The same document as nodes, for the lines of the entries.
	var lines struct {
		Tokens []yaml.Node `yaml:"tokens"`
	}
	_ = yaml.Unmarshal(data, &lines)
	t := &Tokens{byDigest: map[[sha256.Size]byte]*Scope{}}
	names := map[string]bool{}
	for i, e := range doc.Tokens {
		at := fmt.Sprintf("%s: tokens[%d]", file, i)
		if i < len(lines.Tokens) {
			at = fmt.Sprintf("%s:%d: tokens[%d]", file, lines.Tokens[i].Line, i)
		}
		if e.Name == "" {
			return nil, fmt.Errorf("%s: name is missing: every token needs one, for the logs and metrics", at)
		}
		if names[e.Name] {
			return nil, fmt.Errorf("%s: name %q is used twice", at, e.Name)
		}
		names[e.Name] = true
		var d [sha256.Size]byte
		if b, err := hex.DecodeString(e.SHA256); err != nil || len(b) != sha256.Size {
			return nil, fmt.Errorf("%s (%s): sha256 must be 64 hex digits, the SHA-256 of the token (printf %%s \"$TOKEN\" | sha256sum), got %q", at, e.Name, e.SHA256)
		} else {
			copy(d[:], b)
		}
		if other, dup := t.byDigest[d]; dup {
			return nil, fmt.Errorf("%s (%s): the same token as %q", at, e.Name, other.Name)
		}
		if len(e.Domains) == 0 {
			return nil, fmt.Errorf("%s (%s): domains is empty: list the domains the token may use, or \"*\" for all", at, e.Name)
		}
		s := &Scope{Name: e.Name, domains: map[string]bool{}}
		for _, dom := range e.Domains {
			switch {
			case dom == "*" && len(e.Domains) > 1:
				return nil, fmt.Errorf("%s (%s): \"*\" allows every domain: list it alone", at, e.Name)
			case dom == "*":
				s.all = true
			case dom == "":
				return nil, fmt.Errorf("%s (%s): a domain is empty", at, e.Name)
			default:
				s.domains[dom] = true
			}
		}
		t.byDigest[d] = s
	}
	return t, nil
}

// Authenticator checks the bearer tokens of calls: the server's single
// token and those of a tokens file, which can be replaced while it serves.
// Safe for concurrent use.
type Authenticator struct {
	single string
	tokens atomic.Pointer[Tokens]
	file   bool
}

// NewAuthenticator returns the Authenticator of single (the token allowed
// every domain; "" for none) and, when file is true, of a tokens file set
// with SetTokens (until then, none of its tokens is accepted).
func NewAuthenticator(single string, file bool) *Authenticator {
	return &Authenticator{single: single, file: file}
}

// Enabled reports whether calls must carry a token.
func (a *Authenticator) Enabled() bool { return a != nil && (a.single != "" || a.file) }

// SetTokens replaces the tokens file's tokens.
func (a *Authenticator) SetTokens(t *Tokens) { a.tokens.Store(t) }

// Check returns the Scope of the token an Authorization value carries, or
// false when it carries none that is known.
func (a *Authenticator) Check(header string) (*Scope, bool) {
	cred, ok := bearer(header)
	if !ok {
		return nil, false
	}
	if a.single != "" && subtle.ConstantTimeCompare([]byte(cred), []byte(a.single)) == 1 {
		return All, true
	}
	if t := a.tokens.Load(); t != nil {
		// A map lookup by digest: its timing tells of the digest, which
		// says nothing of a token that is not known.
		if s := t.byDigest[sha256.Sum256([]byte(cred))]; s != nil {
			return s, true
		}
	}
	return nil, false
}

// DeniedError is a call whose token may not use the domain it names:
// gRPC PERMISSION_DENIED, HTTP 403.
type DeniedError struct {
	Token  string // the token's Name
	Domain string
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("the token %q may not use domain %q", e.Token, e.Domain)
}

// Authorize returns a *DeniedError when the Scope ctx carries does not
// allow domain.
func Authorize(ctx context.Context, domain string) error {
	if s := From(ctx); !s.Allows(domain) {
		return &DeniedError{Token: s.Name, Domain: domain}
	}
	return nil
}
