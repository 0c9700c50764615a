package api

import (
	"io"
	"net/http"
	"time"
)

// AnswerEarly lets h answer a request before reading its body, as the
// bearer check (401) and the mux (404, 405) do, without waiting for that
// body. By default net/http reads up to 256 KiB of an unread body before it
// writes an answer, so a client that sends headers and withholds its body
// would get its 401 only at the read deadline. For a request with a body,
// AnswerEarly turns on full duplex (http.ResponseController), and when h
// answers before reading the body to its end the answer says
// "Connection: close" and the connection is closed right after it, without
// reading the rest: its next bytes are the body, not a next request.
//
// Requests without a body pass through untouched; for one whose body h reads
// first, as the decision handlers do, the answer and keep-alive are as
// without AnswerEarly.
func AnswerEarly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength == 0 {
			h.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		rc.EnableFullDuplex()
		g := &bodyGuard{w: w, body: r.Body}
		r.Body = g
		h.ServeHTTP(g, r)
		if g.early {
			rc.SetReadDeadline(time.Now()) // ends net/http's read of what is left of the body
		}
	})
}

// bodyGuard is both the request body and the response writer of one request
// (one allocation for the two): it notes whether the body was read to its
// end when the answer's header is written.
type bodyGuard struct {
	w     http.ResponseWriter
	body  io.ReadCloser
	eof   bool // the body was read to its end
	wrote bool // the answer's header is written
	early bool // ... before eof
}

func (g *bodyGuard) Read(p []byte) (int, error) {
	n, err := g.body.Read(p)
	if err == io.EOF {
		g.eof = true
	}
	return n, err
}

func (g *bodyGuard) Close() error { return g.body.Close() }

func (g *bodyGuard) Header() http.Header { return g.w.Header() }

func (g *bodyGuard) WriteHeader(code int) {
	if !g.wrote && code >= 200 {
		g.wrote = true
		if !g.eof {
			g.early = true
			g.w.Header().Set("Connection", "close")
		}
	}
	g.w.WriteHeader(code)
}

func (g *bodyGuard) Write(p []byte) (int, error) {
	if !g.wrote {
		g.WriteHeader(http.StatusOK)
	}
	return g.w.Write(p)
}

// Unwrap gives http.ResponseController the underlying writer.
func (g *bodyGuard) Unwrap() http.ResponseWriter { return g.w }
