package idempotency

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/internal/callid"
)

// ReplayWindow is how long a consumed token remembers the call that
// consumed it (less when the token would have expired sooner), so that a
// resend of that call after a lost reply answers true again: longer than a
// client resends (go-redis: MaxRetries 3 and a 5s ReadTimeout make about
// 20s). A resend that runs later answers false.
const ReplayWindow = time.Minute

// TokenLen is the length of a token from IssueToken: 26 characters of the
// RFC 4648 base32 alphabet (A-Z, 2-7), carrying 128 random bits.
const TokenLen = 26

// IssueToken returns a new one-time token, kept for the Store's TTL: 128
// bits from crypto/rand, so tokens can neither be guessed nor collide. Hand
// it to the client (a hidden form field, a link) and pass it back to
// ConsumeToken when the client submits. It returns store errors wrapped.
func (s *Store) IssueToken(ctx context.Context) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	for range 3 {
		tok := rand.Text()
		ok, err := s.d.issue(ctx, tok, s.cfg.ttl)
		if err != nil {
			return "", fmt.Errorf("idempotency: %w", err)
		}
		if ok {
			return tok, nil
		}
	}
	// Three live collisions of 128 random bits mean a broken random source.
	return "", errors.New("idempotency: IssueToken: random tokens keep colliding")
}

// ConsumeToken reports whether token was issued by IssueToken (on a Store
// with the same backend and Namespace), has not expired and was not consumed
// before, and consumes it. Of any number of concurrent calls with one token,
// exactly one returns true: the token is deleted and its existence reported
// in one atomic step (delete first, then judge), so there is no window
// between checking and consuming. An expired token is deleted too.
//
// The call is safe to resend after a lost reply: the token is marked
// consumed by this call for ReplayWindow (or until it would have expired, if
// sooner), so a second run of the call returns true again, while any other
// call returns false.
//
// A string that cannot be a token (wrong length or alphabet) returns false,
// as tokens come from clients; an empty token is an error naming it. Store
// errors are returned wrapped; the token is then in an unknown state.
func (s *Store) ConsumeToken(ctx context.Context, token string) (bool, error) {
	if token == "" {
		return false, errors.New("idempotency: token is empty")
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if !validToken(token) {
		return false, nil
	}
	ok, err := s.d.consume(ctx, token, callid.New())
	if err != nil {
		return false, fmt.Errorf("idempotency: %w", err)
	}
	return ok, nil
}

func validToken(t string) bool {
	if len(t) != TokenLen {
		return false
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; (c < 'A' || c > 'Z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}
