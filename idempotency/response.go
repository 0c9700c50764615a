package idempotency

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/http"
	"sort"
)

// A stored response is encoded as:
//
//	byte    format version (1)
//	uint16  status code, big endian
//	uvarint number of header fields, then for each:
//	        uvarint len, name; uvarint number of values, then for each: uvarint len, value
//	rest    body
//
// Fields are written in sorted order, so equal responses encode equally.
const responseVersion = 1

// response is a captured HTTP response.
type response struct {
	status int
	header http.Header
	body   []byte
}

// hopByHop headers describe one connection, not the response; they are not
// stored.
var hopByHop = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true,
	"Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

func encodeResponse(r response) []byte {
	names := make([]string, 0, len(r.header))
	for k := range r.header {
		if !hopByHop[http.CanonicalHeaderKey(k)] {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	b := make([]byte, 0, 64+len(r.body))
	b = append(b, responseVersion)
	b = binary.BigEndian.AppendUint16(b, uint16(r.status))
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, k := range names {
		b = appendString(b, k)
		vs := r.header[k]
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendString(b, v)
		}
	}
	return append(b, r.body...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

var errBadResponse = errors.New("idempotency: stored response is malformed")

// decodeResponse parses what encodeResponse wrote. It checks every length
// against the input, so malformed input is an error, never a panic or a huge
// allocation.
func decodeResponse(b []byte) (response, error) {
	if len(b) < 3 || b[0] != responseVersion {
		return response{}, errBadResponse
	}
	r := response{status: int(binary.BigEndian.Uint16(b[1:3])), header: http.Header{}}
	if r.status < 100 || r.status > 999 {
		return response{}, errBadResponse
	}
	rd := bytes.NewReader(b[3:])
	n, err := binary.ReadUvarint(rd)
	if err != nil || n > uint64(rd.Len()) {
		return response{}, errBadResponse
	}
	for range n {
		k, err := readString(rd)
		if err != nil || k == "" {
			return response{}, errBadResponse
		}
		nv, err := binary.ReadUvarint(rd)
		if err != nil || nv > uint64(rd.Len()) {
			return response{}, errBadResponse
		}
		vs := make([]string, 0, nv)
		for range nv {
			v, err := readString(rd)
			if err != nil {
				return response{}, errBadResponse
			}
			vs = append(vs, v)
		}
		r.header[k] = vs
	}
	r.body = b[len(b)-rd.Len():]
	return r, nil
}

func readString(rd *bytes.Reader) (string, error) {
	n, err := binary.ReadUvarint(rd)
	if err != nil || n > uint64(rd.Len()) {
		return "", errBadResponse
	}
	buf := make([]byte, n)
	if _, err := rd.Read(buf); err != nil && n > 0 {
		return "", errBadResponse
	}
	return string(buf), nil
}

// recorder is the http.ResponseWriter handed to the handler: it buffers the
// whole response, so that it can be stored before the client sees it.
// Flush is accepted and does nothing; Hijack is not offered.
type recorder struct {
	header http.Header
	status int // 0 until WriteHeader
	sent   http.Header
	body   bytes.Buffer
}

func newRecorder() *recorder { return &recorder{header: http.Header{}} }

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if r.status != 0 || code < 100 || code > 999 {
		return
	}
	if code < 200 { // informational: not the final response
		return
	}
	r.status = code
	r.sent = r.header.Clone()
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	return r.body.Write(p)
}

// Flush does nothing: the response is sent whole after the handler returns.
func (r *recorder) Flush() {}

// response returns what the handler wrote; a handler that wrote nothing
// answered 200 with no body, as net/http would.
func (r *recorder) response() response {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	return response{status: r.status, header: r.sent, body: r.body.Bytes()}
}

// write sends a response to w.
func (r response) write(w http.ResponseWriter, extra map[string]string) {
	h := w.Header()
	for k, vs := range r.header {
		h[k] = append([]string(nil), vs...)
	}
	for k, v := range extra {
		h.Set(k, v)
	}
	w.WriteHeader(r.status)
	_, _ = w.Write(r.body)
}
