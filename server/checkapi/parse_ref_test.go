package checkapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/floodgate-dev/floodgate/server/config"
	"github.com/floodgate-dev/floodgate/server/decision"
)

// parseCheckRequestReference is the first Parse, built on
// encoding/json's token decoder: the oracle the one-pass parser is fuzzed
// against. It decodes the body of POST /v1/check. Descriptor objects
// keep their member order, which is the entry order matching depends on.
// Unknown members are errors that name them.
//
// Invalid UTF-8 anywhere is an error (encoding/json would replace it).
func parseCheckRequestReference(data []byte) (*Request, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	bad := func(format string, args ...any) error {
		return &decision.InputError{Msg: fmt.Sprintf("check request: "+format, args...)}
	}
	if !utf8.Valid(data) {
		return nil, bad("invalid UTF-8")
	}
	if err := refExpectDelim(dec, '{'); err != nil {
		return nil, bad("%v", err)
	}
	var cr Request
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, bad("%v", err)
		}
		name, _ := tok.(string)
		if seen[name] {
			return nil, bad("member %q is repeated", name)
		}
		seen[name] = true
		switch name {
		case "domain":
			tok, err := dec.Token()
			s, ok := tok.(string)
			if err != nil || !ok {
				return nil, bad("domain must be a string")
			}
			cr.Domain = s
		case "cost", "hits_addend":
			tok, err := dec.Token()
			n, ok := tok.(json.Number)
			if err != nil || !ok {
				return nil, bad("%s must be a whole number", name)
			}
			v, err := strconv.ParseInt(n.String(), 10, 64)
			if err != nil || v < 0 || v > math.MaxInt64/2 {
				return nil, bad("%s %s: want a whole number from 0 to 2^62", name, n)
			}
			cr.Cost = &v
		case "descriptors":
			if err := refExpectDelim(dec, '['); err != nil {
				return nil, bad("descriptors must be a list of objects: %v", err)
			}
			for dec.More() {
				es, err := refReadEntries(dec)
				if err != nil {
					return nil, bad("descriptors[%d]: %v", len(cr.Descriptors), err)
				}
				cr.Descriptors = append(cr.Descriptors, es)
			}
			if _, err := dec.Token(); err != nil {
				return nil, bad("%v", err)
			}
		default:
			return nil, bad("unknown member %q (want domain, descriptors, cost)", name)
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, bad("%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, bad("data after the object")
	}
	return &cr, nil
}

// readEntries reads one descriptor object.
func refReadEntries(dec *json.Decoder) ([]config.Entry, error) {
	if err := refExpectDelim(dec, '{'); err != nil {
		return nil, fmt.Errorf("want an object of entries: %v", err)
	}
	var es []config.Entry
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		tok, err = dec.Token()
		if err != nil {
			return nil, err
		}
		var value string
		switch v := tok.(type) {
		case string:
			value = v
		case json.Number:
			value = v.String()
		case bool:
			value = strconv.FormatBool(v)
		default:
			return nil, fmt.Errorf("entry %q: the value must be a string, number or boolean", key)
		}
		es = append(es, config.Entry{Key: key, Value: value})
	}
	_, err := dec.Token()
	return es, err
}

func refExpectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("want %q, got %v", want, refTokString(tok))
	}
	return nil
}

func refTokString(tok json.Token) string {
	if d, ok := tok.(json.Delim); ok {
		return strconv.Quote(d.String())
	}
	return strings.TrimSpace(fmt.Sprintf("%#v", tok))
}

// checkParseCases are bodies of POST /v1/check, good and bad.
var checkParseCases = []string{
	`{"domain":"api","descriptors":[{"user":"x","path":"/upload"}],"cost":2}`,
	`{"domain":"api","descriptors":[{"user":1,"ok":true,"no":false,"f":-1.5e+3}]}`,
	`{"domain":"api","descriptors":[{}],"cost":0}`,
	`{"domain":"","descriptors":[]}`,
	` { "domain" : "a\u00e9\"\\\/\b\f\n\r\t\ud83d\ude00\ud800" , "descriptors" : [ { "k" : "v" } , { } ] } ` + "\n",
	"{\"domain\":\"\xff\xfe caf\xc3\xa9\"}",
	`{"descriptors":[{"a":"b"}],"hits_addend":99999999999999999999}`,
	`{"cost":1,"hits_addend":2}`, `{"cost":1,"cost":2}`, `{"cost":-1}`, `{"cost":1.0}`, `{"cost":"1"}`, `{"cost":01}`,
	`{"domain":null}`, `{"domain":{}}`, `{"domain":"a",}`, `{,"domain":"a"}`, `{"domain" "a"}`, `{"colour":1}`,
	`{"descriptors":[{"a":null}]}`, `{"descriptors":[{"a":[1]}]}`, `{"descriptors":[{"a":{"b":1}}]}`,
	`{"descriptors":[{"a":tru}]}`, `{"descriptors":[{"a":-}]}`, `{"descriptors":[{"a":1.}]}`, `{"descriptors":[{"a":1e}]}`,
	`{"descriptors":[{"a":"b"},]}`, `{"descriptors":[,{"a":"b"}]}`, `{"descriptors":{}}`, `{"descriptors":[1]}`,
	`{"descriptors":[{"a":"b"}`, `{"domain":"a`, `{"domain":"a\`, `{"domain":"\x"}`, `{"domain":"\u12"}`,
	"{\"domain\":\"a\tb\"}", `[`, `{}{`, `{} x`, `{}  `, ``, ` `, `null`, `"x"`,
}

// TestParseCheckRequest: the one-pass parser gives the reference decoder's
// answers on the cases.
func TestParseCheckRequest(t *testing.T) {
	for _, body := range checkParseCases {
		compareCheckParsers(t, []byte(body))
	}
	cr, err := Parse([]byte(`{"domain":"api","descriptors":[{"user":"alice","n":7}],"cost":3}`))
	if err != nil || cr.Domain != "api" || *cr.Cost != 3 || !reflect.DeepEqual(cr.Descriptors, [][]config.Entry{{{Key: "user", Value: "alice"}, {Key: "n", Value: "7"}}}) {
		t.Fatalf("%+v %v", cr, err)
	}
	for body, want := range map[string]string{
		`{"colour":1}`:                 `unknown member "colour"`,
		`{"cost":1,"cost":2}`:          `member "cost" is repeated`,
		`{"cost":-1}`:                  `cost -1: want a whole number from 0 to 2^62`,
		`{"descriptors":[{"a":null}]}`: `descriptors[0]: entry "a": the value must be a string, number or boolean`,
		`{} x`:                         `data after the object`,
		"{\"domain\":\"a\xffb\"}":      `string at offset 10: invalid UTF-8 at offset 12`,
	} {
		if _, err := Parse([]byte(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
}

// FuzzCheckRequestReference: on any body, the one-pass parser and the
// encoding/json reference agree on the request, or both reject it with an
// InputError.
func FuzzCheckRequestReference(f *testing.F) {
	for _, body := range checkParseCases {
		f.Add([]byte(body))
	}
	f.Fuzz(compareCheckParsers)
}

func compareCheckParsers(t *testing.T, data []byte) {
	got, err := Parse(data)
	want, wantErr := parseCheckRequestReference(data)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("%q: one pass: %v; reference: %v", data, err, wantErr)
	}
	if err != nil {
		var ie *decision.InputError
		if !errors.As(err, &ie) {
			t.Fatalf("%q: not an InputError: %v", data, err)
		}
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: one pass %+v, reference %+v", data, got, want)
	}
}

// BenchmarkParseCheckRequest compares the one-pass parser with the
// encoding/json reference on a typical body.
func BenchmarkParseCheckRequest(b *testing.B) {
	body := []byte(`{"domain":"api","descriptors":[{"user":"alice","path":"/upload"},{"remote_address":"10.1.2.3"}],"cost":1}`)
	for name, parse := range map[string]func([]byte) (*Request, error){
		"one-pass": Parse, "encoding-json": parseCheckRequestReference,
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := parse(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
