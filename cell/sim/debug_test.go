package sim

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// TestDebugMessages prints every replica message of a seed between two
// times (env SIM_DEBUG_SEED, SIM_DEBUG_FROM_MS, SIM_DEBUG_TO_MS); with
// SIM_DEBUG_FORGER=1, the seed as TestSimForger runs it.
func TestDebugMessages(t *testing.T) {
	s := os.Getenv("SIM_DEBUG_SEED")
	if s == "" {
		t.Skip("set SIM_DEBUG_SEED")
	}
	seed, _ := strconv.ParseUint(s, 10, 64)
	from, _ := strconv.ParseInt(os.Getenv("SIM_DEBUG_FROM_MS"), 10, 64)
	to, _ := strconv.ParseInt(os.Getenv("SIM_DEBUG_TO_MS"), 10, 64)
	debugMessages = func(w *world, what string, m string) {
		if w.now >= from*ms && w.now <= to*ms {
			w.tracef("%s %s", what, m)
		}
	}
	defer func() { debugMessages = nil }()
	opt := Options{Seed: seed, Trace: os.Stdout}
	if os.Getenv("SIM_DEBUG_FORGER") == "1" {
		opt.Forger, opt.NoFaults = true, seed%2 == 0
	}
	res := Run(opt)
	t.Log(res.String(), res.Err)
}

// TestDebugFailover prints the trace of one seed of TestFailoverLatency
// (env SIM_DEBUG_FAILOVER=seed).
func TestDebugFailover(t *testing.T) {
	s := os.Getenv("SIM_DEBUG_FAILOVER")
	if s == "" {
		t.Skip("set SIM_DEBUG_FAILOVER")
	}
	seed, _ := strconv.ParseUint(s, 10, 64)
	res := Run(Options{Seed: seed, NoFaults: true, NoReconfig: true, NoBlockingAcquire: true, FaultTime: 3 * time.Second, KillPrimaryAt: time.Second, Trace: os.Stdout}) // as TestFailoverLatency
	t.Log(res.String(), res.Failover)
}
