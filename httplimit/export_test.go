package httplimit

import (
	"context"
	"time"
)

// SetSleep replaces how m holds a request for a LeakyBucket delay, so that
// tests see the delay without waiting for it.
func SetSleep(m *Middleware, f func(ctx context.Context, d time.Duration) error) { m.sleep = f }

// Sleep is the default delay function.
var Sleep = sleep

// ForwardedFor exposes the Forwarded parser to the fuzz test.
var ForwardedFor = forwardedFor
