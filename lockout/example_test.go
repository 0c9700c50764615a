package lockout_test

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/lockout"
)

// loginHandler checks the lockout before it verifies the password, records a
// failure on a bad password and clears the failures on success. A banned
// client gets 429 with Retry-After and its password is not even looked at.
// The key is "account|ip": a guesser is banned from this account from this
// address, while the real user, elsewhere, can still sign in.
func loginHandler(guard *lockout.Guard, passwords map[string]string) http.Handler {
	tooMany := func(w http.ResponseWriter, st lockout.Status) {
		secs := int64((st.RetryAfter + time.Second - 1) / time.Second) // round up
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		http.Error(w, "too many failed sign-ins; try again later", http.StatusTooManyRequests)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass := r.PostFormValue("user"), r.PostFormValue("password")
		ip, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			ip = r.RemoteAddr
		}
		key := user + "|" + ip

		st, err := guard.Check(r.Context(), key)
		if err != nil { // the store is down: fail closed
			http.Error(w, "sign-in unavailable", http.StatusServiceUnavailable)
			return
		}
		if st.Banned {
			tooMany(w, st)
			return
		}
		want, known := passwords[user]
		if !known || subtle.ConstantTimeCompare([]byte(pass), []byte(want)) != 1 {
			st, err := guard.Fail(r.Context(), key)
			if err != nil {
				log.Printf("lockout: %v", err)
				http.Error(w, "wrong user or password", http.StatusUnauthorized)
				return
			}
			if st.Banned {
				tooMany(w, st)
				return
			}
			http.Error(w, fmt.Sprintf("wrong user or password (%d attempts left)", st.Remaining), http.StatusUnauthorized)
			return
		}
		if err := guard.Succeed(r.Context(), key); err != nil {
			log.Printf("lockout: %v", err) // the sign-in stands
		}
		fmt.Fprintf(w, "welcome, %s\n", user)
	})
}

// A login handler on the memory backend (pass a backend.NewRedis to share
// bans between servers). A fake clock makes the output repeatable.
func Example_loginHandler() {
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	mem := backend.NewMemory(backend.WithClock(clk))
	defer mem.Close()
	guard, err := lockout.New(mem, lockout.Policy{MaxFailures: 3, Window: 15 * time.Minute, BanFor: 10 * time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	h := loginHandler(guard, map[string]string{"alice": "correct horse battery staple"})

	try := func(user, pass, addr string) {
		form := url.Values{"user": {user}, "password": {pass}}
		req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.RemoteAddr = addr
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		retry := ""
		if v := rec.Header().Get("Retry-After"); v != "" {
			retry = " Retry-After: " + v
		}
		fmt.Printf("%s from %s: %d%s %s\n", user, addr, rec.Code, retry, strings.TrimSpace(rec.Body.String()))
	}
	const attacker, home = "203.0.113.7:4711", "198.51.100.20:5050"
	try("alice", "123456", attacker)
	try("alice", "password", attacker)
	try("alice", "qwerty", attacker)
	try("alice", "correct horse battery staple", attacker) // banned: not even checked
	try("alice", "correct horse battery staple", home)     // the real user is not locked out
	clk.Advance(10 * time.Minute)
	try("alice", "letmein", attacker) // the ban is over: a fresh set of attempts
	// Output:
	// alice from 203.0.113.7:4711: 401 wrong user or password (2 attempts left)
	// alice from 203.0.113.7:4711: 401 wrong user or password (1 attempts left)
	// alice from 203.0.113.7:4711: 429 Retry-After: 600 too many failed sign-ins; try again later
	// alice from 203.0.113.7:4711: 429 Retry-After: 600 too many failed sign-ins; try again later
	// alice from 198.51.100.20:5050: 200 welcome, alice
	// alice from 203.0.113.7:4711: 401 wrong user or password (2 attempts left)
}

// Check, Fail and Succeed step by step.
func ExampleGuard_Fail() {
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	mem := backend.NewMemory(backend.WithClock(clk))
	defer mem.Close()
	g, _ := lockout.New(mem, lockout.Policy{MaxFailures: 2, Window: time.Minute, BanFor: 5 * time.Minute})
	ctx := context.Background()
	st, _ := g.Fail(ctx, "bob|10.0.0.1")
	fmt.Printf("%+v\n", st)
	_ = g.Succeed(ctx, "bob|10.0.0.1") // failures forgotten
	st, _ = g.Fail(ctx, "bob|10.0.0.1")
	fmt.Printf("%+v\n", st)
	st, _ = g.Fail(ctx, "bob|10.0.0.1")
	fmt.Printf("%+v\n", st)
	clk.Advance(time.Minute)
	_ = g.Succeed(ctx, "bob|10.0.0.1") // does not lift the ban
	st, _ = g.Check(ctx, "bob|10.0.0.1")
	fmt.Printf("%+v\n", st)
	// Output:
	// {Banned:false Remaining:1 RetryAfter:0s}
	// {Banned:false Remaining:1 RetryAfter:0s}
	// {Banned:true Remaining:0 RetryAfter:5m0s}
	// {Banned:true Remaining:0 RetryAfter:4m0s}
}
