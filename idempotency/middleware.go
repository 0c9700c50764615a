package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Header names and limits of the middleware.
const (
	// DefaultKeyHeader is the request header that carries the key.
	DefaultKeyHeader = "Idempotency-Key"
	// ReplayedHeader is set to "true" on a replayed response.
	ReplayedHeader = "Idempotent-Replayed"
	// MaxHeaderKeyLen is the longest key the middleware accepts, in bytes;
	// longer keys get 400 Bad Request.
	MaxHeaderKeyLen = 255
	// DefaultMaxBody is the default of MaxBody.
	DefaultMaxBody = 1 << 20
	// MaxScopeLen is the longest scope a Scope function may return; longer
	// scopes fail the request with 500.
	MaxScopeLen = 512
)

// MiddlewareOption configures Middleware.
type MiddlewareOption func(*mwConfig)

type mwConfig struct {
	header   string
	require  bool
	methods  map[string]bool // nil: every method but the safe ones
	scope    func(*http.Request) string
	maxBody  int64
	store    func(status int) bool
	failOpen bool
	err      error
}

func (c *mwConfig) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("idempotency: "+format, args...)
	}
}

// KeyHeader sets the request header that carries the key (default
// "Idempotency-Key").
func KeyHeader(name string) MiddlewareOption {
	return func(c *mwConfig) {
		if !isHTTPToken(name) {
			c.fail("KeyHeader must be a valid header name, got %q", name)
			return
		}
		c.header = name
	}
}

// RequireKey makes a request without the key header fail with 400 Bad
// Request when its method is handled (see Methods). By default such
// requests pass through to the handler unchanged.
func RequireKey() MiddlewareOption { return func(c *mwConfig) { c.require = true } }

// Methods sets the request methods the middleware handles (default: every
// method except the safe ones, GET, HEAD, OPTIONS and TRACE). Requests with
// other methods pass through, whatever their headers.
func Methods(methods ...string) MiddlewareOption {
	return func(c *mwConfig) {
		if len(methods) == 0 {
			c.fail("Methods needs at least one method")
			return
		}
		c.methods = map[string]bool{}
		for _, m := range methods {
			if !isHTTPToken(m) {
				c.fail("Methods: invalid method %q", m)
				return
			}
			c.methods[m] = true
		}
	}
}

// Scope makes keys per scope, e.g. per authenticated user: the stored key is
// the scope and the header's key together, so two users sending the same key
// do not see each other's responses. The default is the raw key. The scope
// may be empty; it must be at most MaxScopeLen bytes, or the request fails
// with 500.
func Scope(f func(r *http.Request) string) MiddlewareOption {
	return func(c *mwConfig) {
		if f == nil {
			c.fail("Scope function is nil")
			return
		}
		c.scope = f
	}
}

// MaxBody sets the largest request body, in bytes, that the middleware reads
// to fingerprint the request (default 1 MiB). Larger bodies get 413 Content
// Too Large. It must be > 0.
func MaxBody(n int64) MiddlewareOption {
	return func(c *mwConfig) {
		if n <= 0 {
			c.fail("MaxBody must be > 0, got %d", n)
			return
		}
		c.maxBody = n
	}
}

// StoreStatus decides which responses are stored, by status code (default:
// below 500, so that server errors can be retried). A response that is not
// stored is sent as it is, and the key is freed for a retry.
func StoreStatus(keep func(status int) bool) MiddlewareOption {
	return func(c *mwConfig) {
		if keep == nil {
			c.fail("StoreStatus function is nil")
			return
		}
		c.store = keep
	}
}

// FailOpen makes requests run the handler, without idempotency, when the
// store cannot be reached. The default is fail-closed: 503 Service
// Unavailable, since running a request twice is what the key is there to
// prevent.
func FailOpen() MiddlewareOption { return func(c *mwConfig) { c.failOpen = true } }

// Middleware is NewMiddleware for use in a handler chain: if the options are
// invalid, every request handled gets 500 with the configuration error. Use
// NewMiddleware to see the error at construction.
func Middleware(s *Store, opts ...MiddlewareOption) func(http.Handler) http.Handler {
	mw, err := NewMiddleware(s, opts...)
	if err != nil {
		return func(http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				problem(w, http.StatusInternalServerError, "Idempotency middleware misconfigured", err.Error())
			})
		}
	}
	return mw
}

// NewMiddleware returns HTTP middleware for the Idempotency-Key header
// (draft-ietf-httpapi-idempotency-key-header), on the Store s:
//
//   - Requests with a safe method (see Methods) pass through; so do requests
//     without the header, unless RequireKey.
//   - The key is the header's value, as a Structured Field string ("...") or
//     bare; an empty or malformed key, several key fields, or a key longer
//     than MaxHeaderKeyLen bytes get 400.
//   - The first request with a key runs the handler with a buffering
//     ResponseWriter and stores the status, headers and body (StoreStatus
//     decides which; by default not 5xx), then sends them.
//   - A later request with the key gets the stored status, headers and body,
//     with "Idempotent-Replayed: true", without running the handler.
//   - While the first request runs, another with the key gets 409 Conflict
//     (or, when the Store has WaitForResult, waits for the stored response).
//   - A request whose fingerprint (method, path and query, SHA-256 of the
//     body) differs from the first one's gets 422 Unprocessable Content. The
//     body is read (up to MaxBody, else 413) and handed on to the handler.
//   - When the store fails before the handler ran: 503, or the handler runs
//     without idempotency with FailOpen.
//
// Error responses are application/problem+json (RFC 9457). The handler's
// request context is cancelled when the key's lease is lost (see Do).
// NewMiddleware returns an error naming the option for invalid options and
// a nil Store.
func NewMiddleware(s *Store, opts ...MiddlewareOption) (func(http.Handler) http.Handler, error) {
	if s == nil {
		return nil, errors.New("idempotency: Middleware: store is nil")
	}
	c := mwConfig{
		header:  DefaultKeyHeader,
		maxBody: DefaultMaxBody,
		store:   func(status int) bool { return status < 500 },
	}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.err != nil {
		return nil, c.err
	}
	return func(next http.Handler) http.Handler {
		return &middleware{s: s, c: c, next: next}
	}, nil
}

type middleware struct {
	s    *Store
	c    mwConfig
	next http.Handler
}

func (m *middleware) handles(method string) bool {
	if m.c.methods != nil {
		return m.c.methods[method]
	}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return false
	}
	return true
}

// errNotStored is what the middleware's fn returns for a response that is
// not to be stored.
var errNotStored = errors.New("idempotency: response not stored")

func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !m.handles(r.Method) {
		m.next.ServeHTTP(w, r)
		return
	}
	fields := r.Header.Values(m.c.header)
	if len(fields) == 0 {
		if m.c.require {
			problem(w, http.StatusBadRequest, "Idempotency-Key is missing",
				fmt.Sprintf("%s requests need an %s header.", r.Method, m.c.header))
			return
		}
		m.next.ServeHTTP(w, r)
		return
	}
	if len(fields) > 1 {
		problem(w, http.StatusBadRequest, "Invalid Idempotency-Key", "The request has more than one "+m.c.header+" header.")
		return
	}
	key, err := ParseKey(fields[0])
	if err != nil {
		problem(w, http.StatusBadRequest, "Invalid Idempotency-Key", err.Error())
		return
	}
	body, status, err := readBody(r, m.c.maxBody)
	if err != nil {
		problem(w, status, http.StatusText(status), err.Error())
		return
	}
	if m.c.scope != nil {
		sc := m.c.scope(r)
		if len(sc) > MaxScopeLen {
			problem(w, http.StatusInternalServerError, "Idempotency scope too long",
				fmt.Sprintf("The scope is %d bytes; at most %d are allowed.", len(sc), MaxScopeLen))
			return
		}
		// Length-prefixed, so that no (scope, key) pair can spell another.
		key = strconv.Itoa(len(sc)) + ":" + sc + ":" + key
	}
	withBody := func(ctx context.Context) *http.Request {
		req := r.WithContext(ctx)
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		return req
	}

	var ran *recorder // set when the handler ran in this request
	res, replayed, err := m.s.do(r.Context(), key, fingerprint(r, body), m.s.cfg.wait, nil,
		func(ctx context.Context) ([]byte, error) {
			rec := newRecorder()
			m.next.ServeHTTP(rec, withBody(ctx))
			ran = rec
			resp := rec.response()
			if !m.c.store(resp.status) {
				return nil, errNotStored
			}
			return encodeResponse(resp), nil
		})
	switch {
	case ran != nil:
		// The handler ran here; whether or not storing worked, its response
		// is the answer.
		ran.response().write(w, nil)
	case replayed:
		resp, err := decodeResponse(res)
		if err != nil {
			problem(w, http.StatusInternalServerError, "Stored response unreadable", err.Error())
			return
		}
		resp.write(w, map[string]string{ReplayedHeader: "true"})
	case errors.Is(err, ErrInFlight):
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusConflict, "Request in progress",
			"A request with this "+m.c.header+" is still being processed; retry later.")
	case errors.Is(err, ErrMismatch):
		problem(w, http.StatusUnprocessableEntity, "Idempotency-Key reused",
			"This "+m.c.header+" was used for a different request (method, path or body).")
	case m.c.failOpen && r.Context().Err() == nil:
		m.next.ServeHTTP(w, withBody(r.Context()))
	default:
		problem(w, http.StatusServiceUnavailable, "Idempotency store unavailable", err.Error())
	}
}

// readBody reads the whole request body, up to max bytes. On failure it
// returns the status to answer with.
func readBody(r *http.Request, max int64) ([]byte, int, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, 0, nil
	}
	if r.ContentLength > max {
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("the body is %d bytes; at most %d are allowed", r.ContentLength, max)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, max+1))
	if err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("reading the body: %v", err)
	}
	if int64(len(body)) > max {
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("the body is longer than %d bytes", max)
	}
	return body, 0, nil
}

// fingerprint identifies a request's content: SHA-256 over the method, the
// escaped path and query, and the body.
func fingerprint(r *http.Request, body []byte) string {
	h := sha256.New()
	io.WriteString(h, r.Method)
	h.Write([]byte{0})
	io.WriteString(h, r.URL.EscapedPath())
	h.Write([]byte{'?'})
	io.WriteString(h, r.URL.RawQuery)
	h.Write([]byte{0})
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// ParseKey returns the key of an Idempotency-Key header field: a Structured
// Field string (RFC 8941: "..." with \" and \\ escapes, printable ASCII) as
// the draft specifies, or, leniently, a bare value of printable ASCII without
// spaces or quotes. It returns an error for an empty or malformed value and
// for keys longer than MaxHeaderKeyLen bytes.
func ParseKey(field string) (string, error) {
	v := strings.TrimSpace(field)
	if v == "" {
		return "", errors.New("the key is empty")
	}
	var key string
	if v[0] == '"' {
		var b strings.Builder
		i := 1
		for ; i < len(v); i++ {
			c := v[i]
			if c == '"' {
				break
			}
			if c == '\\' {
				i++
				if i == len(v) || (v[i] != '"' && v[i] != '\\') {
					return "", errors.New(`the key has an invalid escape; only \" and \\ are allowed`)
				}
				c = v[i]
			} else if c < 0x20 || c > 0x7e {
				return "", errors.New("the key must be printable ASCII")
			}
			if b.Len() > MaxHeaderKeyLen {
				return "", fmt.Errorf("the key must be at most %d bytes", MaxHeaderKeyLen)
			}
			b.WriteByte(c)
		}
		if i != len(v)-1 {
			return "", errors.New("the key must be one quoted string")
		}
		key = b.String()
	} else {
		for i := 0; i < len(v); i++ {
			if c := v[i]; c <= 0x20 || c > 0x7e || c == '"' || c == '\\' {
				return "", errors.New("the key must be a quoted string or printable ASCII without spaces, quotes or backslashes")
			}
		}
		key = v
	}
	switch {
	case key == "":
		return "", errors.New("the key is empty")
	case len(key) > MaxHeaderKeyLen:
		return "", fmt.Errorf("the key must be at most %d bytes, got %d", MaxHeaderKeyLen, len(key))
	}
	return key, nil
}

// isHTTPToken reports whether s is a non-empty RFC 9110 token (header names
// and methods).
func isHTTPToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// problem writes an RFC 9457 problem details response.
func problem(w http.ResponseWriter, status int, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail,omitempty"`
	}{"about:blank", title, status, detail})
}
