// Package checkapi is the friendly JSON of floodgate serve's POST /v1/check:
// the request (Parse reads it), and the answer (FromDecision builds it from
// a decision). A Go client may use its types to build requests and read
// answers.
package checkapi

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/floodgate-dev/floodgate/server/config"
	"github.com/floodgate-dev/floodgate/server/decision"
)

// Parse decodes the body of POST /v1/check. Descriptor objects
// keep their member order, which is the entry order matching depends on.
// Unknown members are errors that name them.
//
// The body must be one JSON object (RFC 8259; whitespace around it is
// allowed, nothing else after it). Strings decode as encoding/json decodes
// them, escapes resolved, except that invalid UTF-8 is an error (as on
// POST /json): replacing it by U+FFFD would let two different byte strings
// share one counter. An entry value that is a number keeps the number's text ("1e3" stays "1e3"); true and
// false become "true" and "false".
//
// It reads the body in one pass without encoding/json's token decoder, which
// cost 15% of the HTTP server's CPU; FuzzCheckRequestReference holds it to
// the answers of that decoder.
func Parse(data []byte) (*Request, error) {
	p := checkParser{data: data}
	cr, err := p.request()
	if err != nil {
		return nil, &decision.InputError{Msg: "check request: " + err.Error()}
	}
	return cr, nil
}

// checkParser reads a JSON document from data, at offset i.
type checkParser struct {
	data []byte
	i    int
}

func (p *checkParser) request() (*Request, error) {
	if err := p.expect('{'); err != nil {
		return nil, err
	}
	var (
		cr                              Request
		seenDomain, seenDescs, seenCost bool
		seenHits                        bool
	)
	for first := true; ; first = false {
		name, ok, err := p.member(first)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		var seen *bool
		switch name {
		case "domain":
			seen = &seenDomain
		case "descriptors":
			seen = &seenDescs
		case "cost":
			seen = &seenCost
		case "hits_addend":
			seen = &seenHits
		default:
			return nil, fmt.Errorf("unknown member %q (want domain, descriptors, cost)", name)
		}
		if *seen {
			return nil, fmt.Errorf("member %q is repeated", name)
		}
		*seen = true
		switch name {
		case "domain":
			if p.peek() != '"' {
				return nil, fmt.Errorf("domain must be a string")
			}
			if cr.Domain, err = p.string(); err != nil {
				return nil, err
			}
		case "cost", "hits_addend":
			if c := p.peek(); c != '-' && (c < '0' || c > '9') {
				return nil, fmt.Errorf("%s must be a whole number", name)
			}
			n, err := p.number()
			if err != nil {
				return nil, err
			}
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil || v < 0 || v > math.MaxInt64/2 {
				return nil, fmt.Errorf("%s %s: want a whole number from 0 to 2^62", name, n)
			}
			cr.Cost = &v
		case "descriptors":
			if err := p.descriptors(&cr); err != nil {
				return nil, err
			}
		}
	}
	p.space()
	if p.i < len(p.data) {
		return nil, fmt.Errorf("data after the object")
	}
	return &cr, nil
}

func (p *checkParser) descriptors(cr *Request) error {
	if p.peek() != '[' {
		return fmt.Errorf("descriptors must be a list of objects: want \"[\", got %s", p.got())
	}
	p.i++
	for first := true; ; first = false {
		p.space()
		if p.peek() == ']' && first {
			p.i++
			return nil
		}
		if !first {
			if p.peek() == ']' {
				p.i++
				return nil
			}
			if err := p.expect(','); err != nil {
				return err
			}
			p.space()
		}
		es, err := p.entries()
		if err != nil {
			return fmt.Errorf("descriptors[%d]: %v", len(cr.Descriptors), err)
		}
		cr.Descriptors = append(cr.Descriptors, es)
	}
}

// entries reads one descriptor object.
func (p *checkParser) entries() ([]config.Entry, error) {
	if p.peek() != '{' {
		return nil, fmt.Errorf("want an object of entries: want \"{\", got %s", p.got())
	}
	p.i++
	var es []config.Entry
	for first := true; ; first = false {
		key, ok, err := p.member(first)
		if err != nil {
			return nil, err
		}
		if !ok {
			return es, nil
		}
		var value string
		switch c := p.peek(); {
		case c == '"':
			value, err = p.string()
		case c == '-' || c >= '0' && c <= '9':
			value, err = p.number()
		case c == 't':
			value, err = p.literal("true")
		case c == 'f':
			value, err = p.literal("false")
		case c == 'n', c == '{', c == '[':
			return nil, fmt.Errorf("entry %q: the value must be a string, number or boolean", key)
		default:
			return nil, p.syntax("looking for beginning of value")
		}
		if err != nil {
			return nil, err
		}
		es = append(es, config.Entry{Key: key, Value: value})
	}
}

// member reads up to a member's value in an object whose '{' is read: the
// separating comma (unless first), the name and the colon, and the
// whitespace before the value. At the closing '}' it reads it and returns
// ok false.
func (p *checkParser) member(first bool) (name string, ok bool, err error) {
	p.space()
	if p.peek() == '}' {
		p.i++
		return "", false, nil
	}
	if !first {
		if err := p.expect(','); err != nil {
			return "", false, err
		}
		p.space()
	}
	if p.peek() != '"' {
		return "", false, p.syntax("looking for beginning of object key string")
	}
	if name, err = p.string(); err != nil {
		return "", false, err
	}
	if err := p.expect(':'); err != nil {
		return "", false, err
	}
	p.space()
	return name, true, nil
}

func (p *checkParser) space() {
	for p.i < len(p.data) {
		switch p.data[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// peek returns the next byte, 0 at the end.
func (p *checkParser) peek() byte {
	if p.i < len(p.data) {
		return p.data[p.i]
	}
	return 0
}

// expect skips whitespace and reads c.
func (p *checkParser) expect(c byte) error {
	p.space()
	if p.peek() != c {
		return fmt.Errorf("want %q, got %s", c, p.got())
	}
	p.i++
	return nil
}

// got describes what is at the offset, for an error.
func (p *checkParser) got() string {
	if p.i >= len(p.data) {
		return "the end of the body"
	}
	r, _ := utf8.DecodeRune(p.data[p.i:])
	return fmt.Sprintf("%q at offset %d", r, p.i)
}

func (p *checkParser) syntax(context string) error {
	if p.i >= len(p.data) {
		return fmt.Errorf("unexpected end of the body")
	}
	return fmt.Errorf("invalid character %s %s", p.got(), context)
}

// string reads a string literal. One without escapes or control characters
// is copied as is; any other is decoded by encoding/json, for its exact
// rules on escapes. Invalid UTF-8 is an error.
func (p *checkParser) string() (string, error) {
	start := p.i
	p.i++ // the opening quote
	plain := true
	for p.i < len(p.data) {
		c := p.data[p.i]
		switch {
		case c == '"':
			p.i++
			lit := p.data[start:p.i]
			if plain {
				return string(lit[1 : len(lit)-1]), nil
			}
			var s string
			if err := json.Unmarshal(lit, &s); err != nil {
				return "", fmt.Errorf("string at offset %d: %v", start, err)
			}
			return s, nil
		case c == '\\':
			plain = false
			p.i += 2
		case c < 0x20:
			return "", fmt.Errorf("invalid character %q in string literal at offset %d", c, p.i)
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(p.data[p.i:])
			if r == utf8.RuneError && size == 1 {
				return "", fmt.Errorf("string at offset %d: invalid UTF-8 at offset %d", start, p.i)
			}
			p.i += size
		default:
			p.i++
		}
	}
	return "", fmt.Errorf("string at offset %d: unexpected end of the body", start)
}

// number reads a number literal (RFC 8259's grammar) and returns its text.
func (p *checkParser) number() (string, error) {
	start := p.i
	d := p.data
	if p.peek() == '-' {
		p.i++
	}
	switch c := p.peek(); {
	case c == '0':
		p.i++
	case c >= '1' && c <= '9':
		p.digits()
	default:
		return "", p.syntax("in numeric literal")
	}
	if p.peek() == '.' {
		p.i++
		if c := p.peek(); c < '0' || c > '9' {
			return "", p.syntax("after decimal point in numeric literal")
		}
		p.digits()
	}
	if c := p.peek(); c == 'e' || c == 'E' {
		p.i++
		if c := p.peek(); c == '+' || c == '-' {
			p.i++
		}
		if c := p.peek(); c < '0' || c > '9' {
			return "", p.syntax("in exponent of numeric literal")
		}
		p.digits()
	}
	return string(d[start:p.i]), nil
}

func (p *checkParser) digits() {
	for p.i < len(p.data) && p.data[p.i] >= '0' && p.data[p.i] <= '9' {
		p.i++
	}
}

// literal reads word (true or false).
func (p *checkParser) literal(word string) (string, error) {
	if len(p.data)-p.i < len(word) || string(p.data[p.i:p.i+len(word)]) != word {
		return "", p.syntax("in literal " + word)
	}
	p.i += len(word)
	return word, nil
}

// Request is the body of POST /v1/check. Descriptors are JSON objects
// whose members are the entries, in order: {"user": "alice", "path": "/x"}.
type Request struct {
	Domain      string
	Descriptors [][]config.Entry
	Cost        *int64 // nil: 1
}

// Response is the answer of POST /v1/check.
type Response struct {
	Allowed      bool       `json:"allowed"`
	Code         string     `json:"code"`
	RetryAfterMS int64      `json:"retry_after_ms"`         // the longest of the descriptors'; -1 when a cost can never be admitted
	Failed       bool       `json:"store_failed,omitempty"` // answered by the failure mode
	Decisions    []Decision `json:"decisions"`
}

// Decision is one descriptor's part of a Response.
type Decision struct {
	Code       string `json:"code"`
	Descriptor string `json:"descriptor,omitempty"` // the limit's path in the configuration; "" when no limit applies
	Name       string `json:"name,omitempty"`
	Algorithm  string `json:"algorithm,omitempty"`
	Limit      uint32 `json:"limit,omitempty"`
	Unit       string `json:"unit,omitempty"`
	// UnitMultiplier is the number of units in the limit's period, given
	// when above 1: limit 1000, unit SECOND, unit_multiplier 10 is 1000
	// per 10 seconds.
	UnitMultiplier uint32 `json:"unit_multiplier,omitempty"`
	Unlimited      bool   `json:"unlimited,omitempty"`
	Remaining      int64  `json:"remaining"`
	RetryAfterMS   int64  `json:"retry_after_ms"`
	ResetAfterMS   int64  `json:"reset_after_ms"`
	Shadow         bool   `json:"shadow,omitempty"`
}

// FromDecision is the answer to a request decided as out.
func FromDecision(out *decision.Response) *Response {
	resp := &Response{
		Allowed:   out.Code != decision.CodeOverLimit,
		Code:      out.Code.String(),
		Failed:    out.Failed,
		Decisions: make([]Decision, len(out.Statuses)),
	}
	for i := range out.Statuses {
		st := &out.Statuses[i]
		d := Decision{Code: st.Code.String(), Shadow: st.Shadow}
		if l := st.Limit; l != nil {
			d.Descriptor, d.Name, d.Algorithm = l.Path, l.Name, l.Algorithm
			if l.Unlimited {
				d.Unlimited = true
				d.Remaining = math.MaxUint32
			} else {
				d.Limit, d.Unit = l.RequestsPerUnit, l.Unit.String()
				if l.UnitMultiplier > 1 {
					d.UnitMultiplier = l.UnitMultiplier
				}
				d.Remaining = max(st.Remaining, 0)
				d.RetryAfterMS = ceilMS(st.RetryAfter)
				d.ResetAfterMS = ceilMS(st.ResetAfter)
			}
		}
		if st.Code == decision.CodeOverLimit {
			switch {
			case d.RetryAfterMS < 0 || resp.RetryAfterMS < 0:
				resp.RetryAfterMS = -1
			default:
				resp.RetryAfterMS = max(resp.RetryAfterMS, d.RetryAfterMS)
			}
		}
		resp.Decisions[i] = d
	}
	return resp
}

// ceilMS rounds d up to whole milliseconds, so that a client that waits that
// long is admitted; negative durations give -1.
func ceilMS(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
