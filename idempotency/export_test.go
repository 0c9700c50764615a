package idempotency

import (
	"context"
	"time"
)

// Test hooks: the conformance suite drives the store side of a Store
// directly, one script call per step, and the crash tests stop renewals as
// a dead process would.

// DisableRenewal makes s never renew the leases of its runners, as if the
// runner's process had died while fn ran.
func DisableRenewal(s *Store) { s.noRenew = true }

// Outcome is the result of Begin in comparable form.
type Outcome struct {
	State  string // "claimed", "in flight", "done", "mismatch"
	Hint   time.Duration
	Val    string
	Failed bool
	Msg    string
}

func Begin(ctx context.Context, s *Store, key, owner, fp string) (Outcome, error) {
	o, err := s.d.begin(ctx, key, owner, fp, s.cfg.lease, false)
	if err != nil {
		return Outcome{}, err
	}
	out := Outcome{State: [...]string{"claimed", "in flight", "done", "mismatch"}[o.state], Hint: o.hint}
	if o.state == done {
		out.Val, out.Failed, out.Msg = string(o.res.val), o.res.failed, o.res.msg
	}
	return out, nil
}

func Renew(ctx context.Context, s *Store, key, owner string) (bool, error) {
	return s.d.renew(ctx, key, owner, s.cfg.lease)
}

func Complete(ctx context.Context, s *Store, key, owner, val string, failed bool, msg string) (bool, error) {
	return s.d.complete(ctx, key, owner, s.cfg.ttl, result{val: []byte(val), failed: failed, msg: msg})
}

func Abort(ctx context.Context, s *Store, key, owner string) (bool, error) {
	return s.d.abort(ctx, key, owner)
}

// ConsumeTokenCall is ConsumeToken as the call with the given ID, so that a
// test can run one call twice.
func ConsumeTokenCall(ctx context.Context, s *Store, token, call string) (bool, error) {
	return s.d.consume(ctx, token, call)
}
