package testenv

// respScanner finds where the replies of a RESP2 or RESP3 stream begin and
// end without decoding them, for the fault proxy's LoseNextReplies. It is fed
// the stream in arbitrary chunks through step and keeps only counters between
// calls: a bulk payload of any size costs O(1) per chunk.
//
// A reply is one complete top-level value; an attribute ('|') and the value
// it annotates form one reply. Streamed strings and aggregates ("$?", "*?")
// and anything that is not RESP make the scanner give up (bad): it then
// reports no more events, so the stream is still forwarded, only never
// split into replies.
//
// The zero value is ready to scan a stream from its first byte. A scanner is
// owned by one goroutine.
type respScanner struct {
	bad bool // the stream is not RESP (as far as we understand it)

	started bool   // the current top-level value has been announced (scanEventStart)
	inLine  bool   // inside a line: the type byte has been consumed
	typ     byte   // type byte of the current line
	num     []byte // digits of a length header line, without CR LF
	bulk    int    // bytes of a bulk payload plus its CR LF still to skip

	// stack holds the open aggregates, innermost last: elements still
	// expected, and whether it is an attribute (which annotates the value
	// after it instead of being an element of its parent).
	stack []respAgg
}

type respAgg struct {
	left int
	attr bool
}

// Events reported by respScanner.step.
const (
	scanNone  = iota // consumed everything, no boundary in it
	scanStart        // a top-level value starts at the returned offset (its type byte is not consumed)
	scanEnd          // a top-level value ended just before the returned offset
)

// maxHeaderLine caps the digits of a length header; longer means not RESP.
const maxHeaderLine = 24

// step consumes b up to and including its first event and returns how many
// bytes it consumed and the event. scanStart is reported once per value, with
// b[n] its type byte; calling step again with b[n:] goes on from there.
// After the scanner has gone bad, step consumes everything and reports
// scanNone.
func (s *respScanner) step(b []byte) (n int, ev int) {
	for n < len(b) {
		if s.bad {
			return len(b), scanNone
		}
		if s.bulk > 0 {
			k := min(s.bulk, len(b)-n)
			s.bulk -= k
			n += k
			if s.bulk == 0 && s.finish() {
				return n, scanEnd
			}
			continue
		}
		if !s.inLine {
			if !s.started && len(s.stack) == 0 {
				s.started = true
				return n, scanStart
			}
			s.inLine, s.typ, s.num = true, b[n], s.num[:0]
			n++
			if !isRESPType(s.typ) {
				s.bad = true
			}
			continue
		}
		// Inside a line: find its end.
		i := n
		for i < len(b) && b[i] != '\n' {
			i++
		}
		if isLengthType(s.typ) {
			s.num = append(s.num, b[n:i]...)
			if len(s.num) > maxHeaderLine {
				s.bad = true
				continue
			}
		}
		if i == len(b) {
			return len(b), scanNone
		}
		n = i + 1
		s.inLine = false
		if s.line() {
			return n, scanEnd
		}
	}
	return n, scanNone
}

// isRESPType reports whether t can start a RESP value.
func isRESPType(t byte) bool {
	switch t {
	case '+', '-', ':', '_', ',', '#', '(':
		return true
	}
	return isLengthType(t)
}

func isLengthType(t byte) bool {
	switch t {
	case '$', '!', '=', '*', '%', '~', '>', '|':
		return true
	}
	return false
}

// line handles a complete line of type s.typ (s.num holds a length header's
// text) and reports whether it completed a top-level value.
func (s *respScanner) line() bool {
	if !isLengthType(s.typ) {
		return s.finish()
	}
	num := s.num
	if len(num) > 0 && num[len(num)-1] == '\r' {
		num = num[:len(num)-1]
	}
	v, ok := atoiRESP(num)
	if !ok {
		s.bad = true // includes "?" (streamed) and garbage
		return false
	}
	switch s.typ {
	case '$', '!', '=':
		if v < 0 { // null bulk string ($-1)
			return s.finish()
		}
		s.bulk = v + 2
		return false
	}
	if v < 0 { // null array (*-1)
		return s.finish()
	}
	attr := s.typ == '|'
	if s.typ == '%' || attr {
		v *= 2
	}
	if v == 0 {
		if attr {
			return false // an empty attribute: still waiting for its value
		}
		return s.finish()
	}
	s.stack = append(s.stack, respAgg{left: v, attr: attr})
	return false
}

// finish records that one value is complete and reports whether that
// completed a top-level value (a reply).
func (s *respScanner) finish() bool {
	for len(s.stack) > 0 {
		top := &s.stack[len(s.stack)-1]
		top.left--
		if top.left > 0 {
			return false
		}
		attr := top.attr
		s.stack = s.stack[:len(s.stack)-1]
		if attr {
			// The attribute is done; the value it annotates comes next and
			// takes its place as the element (or reply).
			return false
		}
	}
	s.started = false
	return true
}

// atoiRESP parses a RESP length: an optional '-' and decimal digits, at most
// a little over a billion so that the arithmetic above cannot overflow.
func atoiRESP(b []byte) (int, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 10 {
		return 0, false
	}
	v := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	if v > 1<<31 {
		return 0, false
	}
	if neg {
		return -v, true
	}
	return v, true
}
