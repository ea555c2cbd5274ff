package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	// The command name may contain spaces and parentheses.
	stat := "1234 (my (odd) prog) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 100 1000 200 18446744073709551615"
	got, err := parseStatCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := 3 * time.Second; got != want { // (250+50) ticks at 100 Hz
		t.Errorf("cpu %v, want %v", got, want)
	}
	for _, bad := range []string{"", "1234 (x) S 1 2", "no paren"} {
		if _, err := parseStatCPU(bad); err == nil {
			t.Errorf("parseStatCPU(%q) accepted", bad)
		}
	}
}

func TestReadProcStatsOfSelf(t *testing.T) {
	st, err := readProcStats(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.RSS < 1<<20 {
		t.Errorf("RSS %d bytes: implausible", st.RSS)
	}
}

func TestProcSetStopsWhatItStarted(t *testing.T) {
	ps := newProcSet()
	dir := t.TempDir()
	start := func(name string) *proc {
		p, err := ps.start(nodeSpec{name: name, argv: []string{"sleep", "60"}, dir: dir, log: filepath.Join(dir, name+".log")})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b := start("a"), start("b")
	if ps.count() != 2 {
		t.Fatalf("count %d, want 2", ps.count())
	}
	ps.kill9(a)
	if done, _ := a.exited(); !done {
		t.Error("kill9: process still running")
	}
	t0 := time.Now()
	ps.stopAll()
	if done, _ := b.exited(); !done {
		t.Error("stopAll: process still running")
	}
	if d := time.Since(t0); d > stopGrace {
		t.Errorf("stopAll took %v: SIGTERM ignored?", d)
	}
	if ps.count() != 0 {
		t.Errorf("count %d after stopAll", ps.count())
	}
	log, _ := os.ReadFile(filepath.Join(dir, "a.log"))
	if len(log) == 0 {
		t.Error("the log does not record the command line")
	}
}

func TestLoopbackOnly(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:1": true, "localhost:2": true, "[::1]:3": true, "10.0.0.1:4": false, "example.com:5": false, "nonsense": false} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v", addr, got)
		}
	}
	ports, err := freePorts(3)
	if err != nil || len(ports) != 3 || ports[0] == ports[1] || ports[1] == ports[2] {
		t.Errorf("freePorts = %v, %v", ports, err)
	}
}
