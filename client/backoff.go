package client

import (
	"math/rand/v2"
	"time"
)

// Retry limits. They are explicit so that a dead cell costs a caller a known,
// small amount of time rather than an open-ended wait.
const (
	// maxCallAttempts bounds how often one call is sent (first try included)
	// when its failures are retryable (see retryClass). Six attempts span
	// about 1.5 s of pauses: longer than a failover of the cell should take
	// (the replicated cell aims at well under 1.5 s), so a call made while
	// the cell elects a new master reaches it.
	maxCallAttempts = 6

	// callBackoffBase and callBackoffMax shape the pause between attempts of
	// one call: base·2^n with jitter, never above max, counted from the
	// failure (a locate round waited for is part of the pause, and a round
	// that names another master ends it: locator.pause). With 6 attempts a
	// call to an unreachable cell gives up after at most
	// 0.05+0.1+0.2+0.4+0.8 = 1.55 s of pauses (plus the connect timeouts,
	// and any locate round that outlasts its pause).
	callBackoffBase = 50 * time.Millisecond
	callBackoffMax  = time.Second

	// maxQuickRedirects bounds the retries of one call sent at once,
	// without a pause, because a replica named (or a locate round found)
	// the master elsewhere.
	maxQuickRedirects = 2
)

// jitter returns a random number in [0, 1) for keepalive.Backoff.
func jitter() float64 { return rand.Float64() }
