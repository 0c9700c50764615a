package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/floodgate-dev/floodgate/server"
	"github.com/floodgate-dev/floodgate/server/storeurl"
)

// listenDebug opens the listener of --debug-addr. Profiles show the request
// flow and the command line, so an address other than loopback (or one that
// binds every interface, such as ":6060") is refused unless a bearer token
// protects the endpoint too.
func listenDebug(addr string, tokenSet bool) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if !tokenSet && !isLoopback(host) {
		return nil, fmt.Errorf("%s is not a loopback address: the profiles would be open to the network; use 127.0.0.1:PORT, or require a token (--token-file), which then guards this endpoint too", addr)
	}
	return net.Listen("tcp", addr)
}

// isLoopback reports whether host names only this machine: localhost or a
// loopback IP. An empty host binds every interface, so it is not.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// debugHandler is pprofMux behind the bearer token when one is set.
func debugHandler(token string) http.Handler {
	mux := pprofMux()
	if token == "" {
		return mux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !server.BearerOK(r.Header.Get("Authorization"), token) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="floodgate"`)
			http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// cmdline is net/http/pprof's Cmdline with every password in the arguments
// replaced (storeurl.Redact): a --redis URL may carry one.
func cmdline(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprint(w, strings.Join(redactArgs(os.Args), "\x00"))
}

// redactArgs returns args with the passwords of URLs replaced, in both the
// "--redis URL" and the "--redis=URL" forms.
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if name, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(name, "-") {
			out[i] = name + "=" + storeurl.Redact(v)
			continue
		}
		out[i] = storeurl.Redact(a)
	}
	return out
}
