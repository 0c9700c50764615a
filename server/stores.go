package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/floodgate-dev/floodgate/server/config"
	"github.com/floodgate-dev/floodgate/server/internal/breaker"
)

// A Service keeps limit state on one store, or on two: the main one and,
// with Options.PerSecondBackend, a per-second one for every limit whose
// period is one second (envoyproxy/ratelimit's REDIS_PERSECOND: the busiest,
// shortest-lived keys on a Redis of their own). Each store has its own
// timeout, circuit breakers (per slot range on a Cluster) and the store
// label of floodgate_backend_errors_total and floodgate_breaker_open.
//
// A request whose limits are all on one store is decided on it as with a
// single store: in one atomic step. No script can span two servers, so a
// request with limits on both is decided per store, per-second store first
// (allowSplit): each store's part atomically, and the main store's only when
// the per-second store admitted its part. So a request over a per-second
// limit consumes nothing from either store, and one over a limit of the main
// store has spent its per-second units, which come back when that second
// ends; the longer windows of the main store are never spent by a denied
// request.
//
// In envoy's mode, where every descriptor is counted on its own
// (allowEach), the main store's descriptors are counted first, then the
// per-second store's, as envoyproxy/ratelimit runs its two pipelines.
//
// When one of the two stores fails, under FailOpen its descriptors are
// answered OK and the other store's are decided as usual (Response.Failed
// is set); under FailClosed and FailError the whole request is answered by
// the failure mode, as with one store. A failure after a per-second denial
// keeps the denial.

// Store names: the store label of the metrics.
const (
	storeMain      = "main"
	storePerSecond = "persecond"
)

// store is one of a Service's stores.
type store struct {
	name     string // storeMain or storePerSecond
	b        backend.Backend
	remote   bool          // across a network: calls get the timeout and the breakers
	timeout  time.Duration // per call
	breakers *breaker.Set  // one per slot range on a Redis Cluster, else one
}

func newStore(name string, b backend.Backend, timeout time.Duration, o BreakerOptions) *store {
	rb, remote := b.(*backend.Redis)
	var slot func(string) int
	if r := unwrap.Redis(rb); remote && r.Cluster() {
		slot = r.Slot
	}
	if o.Probe == 0 {
		o.Probe = timeout // an open breaker probes again after about one timeout
	}
	return &store{name: name, b: b, remote: remote, timeout: timeout, breakers: breaker.New(o, slot)}
}

// wrap names st in err, a failure of a call to st; nil stays nil. The
// per-second store's errors say so; the main store's read as before.
func (st *store) wrap(err error) error {
	if err == nil {
		return nil
	}
	return &storeError{store: st.name, err: err}
}

// storeError is a failed call to one store.
type storeError struct {
	store string
	err   error
}

func (e *storeError) Error() string {
	if e.store == storePerSecond {
		return "per-second store: " + e.err.Error()
	}
	return e.err.Error()
}

func (e *storeError) Unwrap() error { return e.err }

// stores returns the service's stores, the main one first.
func (s *Service) stores() []*store {
	if s.ps == nil {
		return []*store{s.main}
	}
	return []*store{s.main, s.ps}
}

// perSecond reports whether l's state is kept on the per-second store: its
// period is one second, a unit of second without a unit_multiplier (as
// envoyproxy/ratelimit's cacheKey.PerSecond, whose units have none),
// whatever its algorithm, and there is a per-second store. A period of
// several seconds stays on the main store: its keys live as long as it
// does, and the per-second store is for the shortest-lived. A reload that
// changes a limit's period to or from one second moves it between stores;
// a new period starts its counts afresh anyway.
func (s *Service) perSecond(l *config.Limit) bool {
	return s.ps != nil && l.Unit == config.UnitSecond && l.UnitMultiplier <= 1
}

// storeOf returns the store that keeps l's state.
func (s *Service) storeOf(l *config.Limit) *store {
	if s.perSecond(l) {
		return s.ps
	}
	return s.main
}

// onPerSecond reports whether q's Limiter keeps its state on the per-second
// store.
func (s *Service) onPerSecond(q ratelimit.Request) bool {
	return s.ps != nil && q.Limiter.Backend() == s.ps.b
}

// allStoresDown reports whether every breaker of every store is open:
// nothing can be decided.
func (s *Service) allStoresDown() bool {
	for _, st := range s.stores() {
		if !st.breakers.AllOpen() {
			return false
		}
	}
	return true
}

// partialOutage describes the stores that are failing, in part or whole,
// while the service is ready; "" when none is.
func (s *Service) partialOutage() string {
	if s.ps == nil {
		if open, total := s.main.breakers.Open(); open > 0 {
			return fmt.Sprintf("the store is partly failing: %d of %d slot ranges are answered by the failure mode", open, total)
		}
		return ""
	}
	msg := ""
	for _, st := range s.stores() {
		what := "the main store"
		if st == s.ps {
			what = "the per-second store"
		}
		open, total := st.breakers.Open()
		switch {
		case open == 0:
			continue
		case open == total:
			what += " is failing: its limits are answered by the failure mode"
		default:
			what += fmt.Sprintf(" is partly failing: %d of %d slot ranges are answered by the failure mode", open, total)
		}
		if msg != "" {
			msg += "; "
		}
		msg += what
	}
	return msg
}

// partialFailure is allowSplit's report that one of the two stores failed
// under FailOpen: the results of its requests are zero (admitted), the
// other store's are its decisions.
type partialFailure struct{ err error }

func (e *partialFailure) Error() string { return "one store failed: " + e.err.Error() }
func (e *partialFailure) Unwrap() error { return e.err }

// allowSplit decides reqs whose Limiters are on both stores (see the top of
// this file): the per-second store's requests first, atomically; then the
// main store's, atomically, when the per-second store admitted, or as a peek
// (consuming nothing, for their statuses) when it denied. It returns
// whether every request was admitted. The error is the failing store's,
// which the caller answers by the failure mode, except under FailOpen, where
// a store failure is a *partialFailure and the results are valid.
func (s *Service) allowSplit(ctx context.Context, reqs []ratelimit.Request, results []ratelimit.Result) (bool, error) {
	var psIdx, mainIdx []int
	for i, q := range reqs {
		if s.onPerSecond(q) {
			psIdx = append(psIdx, i)
		} else {
			mainIdx = append(mainIdx, i)
		}
	}
	part := func(idx []int, peek bool) ([]ratelimit.Request, []ratelimit.Result) {
		rq := make([]ratelimit.Request, len(idx))
		for j, i := range idx {
			rq[j] = reqs[i]
			if peek {
				rq[j].N = 0
			}
		}
		return rq, make([]ratelimit.Result, len(idx))
	}
	var failed error
	psReqs, psRes := part(psIdx, false)
	psOK, err := s.allowOn(ctx, s.ps, psReqs, psRes, nil)
	if err != nil {
		if !s.failOpenAlone(ctx, err) {
			return false, err
		}
		failed, psOK = err, true
		clear(psRes)
	}
	mainReqs, mainRes := part(mainIdx, !psOK)
	mainOK, err := s.allowOn(ctx, s.main, mainReqs, mainRes, nil)
	if err != nil {
		switch {
		case !psOK:
			// Over a per-second limit: the denial stands, whatever the
			// failure mode; the main store's statuses are unknown.
		case !s.failOpenAlone(ctx, err):
			// The per-second units stay spent, as after a denial.
			return false, err
		}
		failed, mainOK = errors.Join(failed, err), true
		clear(mainRes)
	}
	allowed := psOK && mainOK
	for j, i := range psIdx {
		results[i] = psRes[j]
		results[i].Allowed = allowed
	}
	for j, i := range mainIdx {
		results[i] = mainRes[j]
		results[i].Allowed = allowed
	}
	if failed != nil {
		return allowed, &partialFailure{err: failed}
	}
	return allowed, nil
}

// failOpenAlone reports whether err, one store's failure, is answered for
// that store's requests alone: under FailOpen, unless the caller went away
// or its deadline ended (those end the whole request).
func (s *Service) failOpenAlone(ctx context.Context, err error) bool {
	if s.opts.FailureMode != FailOpen || ctx.Err() != nil {
		return false
	}
	var gone *callerGoneError
	var st *storeTimeoutError
	return !errors.As(err, &gone) && !(errors.As(err, &st) && st.caller)
}

// allowEach decides every request of reqs on its own, as
// envoyproxy/ratelimit counts descriptors by default, except those skip
// (when not nil) marks: those of the main store first, then the per-second
// store's (envoy's order: its main pipeline, then its per-second one). The
// first error ends it, and what was counted before stays counted; except
// that with two stores under FailOpen a failing store's remaining requests
// are answered OK without a call and the other store's are still decided (a
// *partialFailure, as allowSplit).
func (s *Service) allowEach(ctx context.Context, reqs []ratelimit.Request, results []ratelimit.Result, skip []bool) error {
	var failed error
	for _, perSecond := range []bool{false, true} {
		for j := range reqs {
			if s.onPerSecond(reqs[j]) != perSecond || skip != nil && skip[j] {
				continue
			}
			_, err := s.allow(ctx, reqs[j:j+1], results[j:j+1])
			if err == nil {
				continue
			}
			if s.ps == nil || !s.failOpenAlone(ctx, err) {
				return err
			}
			// This store's other requests are answered OK: zero results.
			failed = errors.Join(failed, err)
			for k := j; k < len(reqs); k++ {
				if s.onPerSecond(reqs[k]) == perSecond && (skip == nil || !skip[k]) {
					results[k] = ratelimit.Result{}
				}
			}
			break
		}
		if s.ps == nil {
			break
		}
	}
	if failed != nil {
		return &partialFailure{err: failed}
	}
	return nil
}
