package sim

import (
	"os"
	"strconv"
	"testing"
)

// TestDebugForger prints the trace of one seed of TestSimForger (env
// SIM_DEBUG_FORGER=seed).
func TestDebugForger(t *testing.T) {
	s := os.Getenv("SIM_DEBUG_FORGER")
	if s == "" {
		t.Skip("set SIM_DEBUG_FORGER")
	}
	seed, _ := strconv.ParseUint(s, 10, 64)
	res := Run(Options{Seed: seed, Forger: true, NoFaults: seed%2 == 0, Trace: os.Stdout})
	t.Log(res.String(), res.Err)
}
