package simulate

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// LineError is a problem at one line of a traffic file.
type LineError struct {
	File string
	Line int // 1-based; 0 when the problem is not at a line
	Msg  string
}

// Error returns "FILE:LINE: problem", or "FILE: problem" without a line.
func (e *LineError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return e.File + ": " + e.Msg
}

const timestampHelp = "want RFC3339 (2025-01-01T00:00:00.25Z) or Unix seconds (1735689600.25)"

// ParseTraffic reads a traffic file: one request per line, either a timestamp
// alone or "timestamp,key" (CSV: a key with commas or quotes is quoted, as in
// "a,b"). A timestamp is RFC3339 with optional fractional seconds
// (2025-01-01T00:00:00.25Z, 2025-01-01T01:00:00+01:00) or Unix seconds with an
// optional fraction (1735689600.25); both are taken to the microsecond (finer
// digits are dropped) and must lie between 1970 and 2255. Blank lines, lines
// starting with '#', and a header line (a first line whose first field is
// timestamp, time, ts, date, datetime or @timestamp, such as "timestamp,key")
// are skipped. Lines may come in any order; requests at one
// instant keep their order. Each key has its own state in each rule; lines
// without a key share the key "".
//
// name is the file's name for errors and titles. The error is a *LineError
// naming the line; there is at most MaxRequests requests.
func ParseTraffic(name string, r io.Reader) (*Traffic, error) {
	cr := csv.NewReader(r)
	cr.Comment = '#'
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	cr.LazyQuotes = true
	cr.ReuseRecord = true
	var (
		times []int64
		keys  []string
		first = true
	)
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return nil, &LineError{File: name, Line: pe.Line, Msg: pe.Err.Error()}
			}
			return nil, &LineError{File: name, Msg: err.Error()}
		}
		line, _ := cr.FieldPos(0)
		if first {
			first = false
			if isHeader(rec) {
				continue
			}
		}
		if len(rec) > 2 {
			return nil, &LineError{File: name, Line: line, Msg: fmt.Sprintf("%d fields; want a timestamp, or timestamp,key", len(rec))}
		}
		us, err := parseTimestamp(strings.TrimSpace(rec[0]))
		if err != nil {
			return nil, &LineError{File: name, Line: line, Msg: err.Error()}
		}
		if len(times) == MaxRequests {
			return nil, &LineError{File: name, Line: line, Msg: fmt.Sprintf("more than %d requests; simulate a part of the file", MaxRequests)}
		}
		times = append(times, us)
		key := ""
		if len(rec) == 2 {
			key = strings.TrimSpace(rec[1])
		}
		keys = append(keys, strings.Clone(key))
	}
	t, err := fromArrivals(name, times, keys)
	if err != nil {
		return nil, &LineError{File: name, Msg: "no requests (want one timestamp, or timestamp,key, per line)"}
	}
	return t, nil
}

// headers are the names a header line may give the timestamp column.
var headers = []string{"timestamp", "time", "ts", "date", "datetime", "@timestamp"}

// isHeader reports whether a first record is a header such as timestamp,key.
func isHeader(rec []string) bool {
	return slices.Contains(headers, strings.ToLower(strings.TrimSpace(rec[0])))
}

// parseTimestamp reads RFC3339 or Unix seconds into µs since the Unix epoch.
func parseTimestamp(s string) (int64, error) {
	if s == "" {
		return 0, fmt.Errorf("empty timestamp; %s", timestampHelp)
	}
	if strings.ContainsAny(s, "T:") || strings.Count(s, "-") > 1 {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return 0, fmt.Errorf("%q is not an RFC3339 timestamp such as 2025-01-01T00:00:00.25Z", s)
		}
		if t.Before(time.Unix(0, 0)) || t.UnixMicro() >= maxMicros {
			return 0, fmt.Errorf("%s is out of range: timestamps must lie between 1970 and 2255", s)
		}
		return t.UnixMicro(), nil
	}
	whole, frac, dot := strings.Cut(s, ".")
	if whole == "" && frac != "" {
		whole = "0"
	}
	if whole == "" || !digits(whole) || dot && !digits(frac) && frac != "" {
		if strings.HasPrefix(s, "-") {
			return 0, fmt.Errorf("%q is before 1970: timestamps must lie between 1970 and 2255", s)
		}
		return 0, fmt.Errorf("%q is not a timestamp; %s", s, timestampHelp)
	}
	whole = strings.TrimLeft(whole, "0")
	const maxSeconds = maxMicros / 1e6 // 9007199254 s, in 2255
	if len(whole) > 10 {
		return 0, fmt.Errorf("%s is out of range: Unix seconds must lie between 0 and %d (in 2255)", s, maxSeconds)
	}
	var sec int64
	for _, c := range whole {
		sec = sec*10 + int64(c-'0')
	}
	frac = (frac + "000000")[:6]
	var us int64
	for _, c := range frac {
		us = us*10 + int64(c-'0')
	}
	if sec > maxSeconds || sec*1e6+us >= maxMicros {
		return 0, fmt.Errorf("%s is out of range: Unix seconds must lie between 0 and %d (in 2255)", s, maxSeconds)
	}
	return sec*1e6 + us, nil
}

func digits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}
