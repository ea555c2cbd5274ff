package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestDefaultConfigIsValid(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Sessions != 100_000 || c.Duration != 5*time.Second || len(c.PeerNodes) != 2 {
		t.Errorf("defaults changed: %+v", c)
	}
}

func TestValidateRejects(t *testing.T) {
	cases := map[string]func(*Config){
		"unknown system":    func(c *Config) { c.Systems = []string{"consul"} },
		"4 nodes":           func(c *Config) { c.PeerNodes = []int{4} },
		"no clients":        func(c *Config) { c.Clients = nil },
		"tiny window":       func(c *Config) { c.Duration = time.Millisecond },
		"too many sessions": func(c *Config) { c.Sessions = 1_000_000 },
		"direct over fds":   func(c *Config) { c.DirectSessions = 20_000 },
		"remote cell":       func(c *Config) { c.ChubbyCell = []string{"10.0.0.1:7000"} },
		"empty out":         func(c *Config) { c.Out = "" },
	}
	for name, mutate := range cases {
		c := DefaultConfig()
		mutate(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// --quick replaces the defaults it lists, but never a value the user set.
func TestQuickKeepsExplicitFlags(t *testing.T) {
	c := DefaultConfig()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	bindFlags(fs, &c)
	if err := fs.Parse([]string{"--quick", "--duration", "2s", "--nodes", "3", "--clients=1,64"}); err != nil {
		t.Fatal(err)
	}
	if err := applyQuick(fs, quickValues); err != nil {
		t.Fatal(err)
	}
	if c.Duration != 2*time.Second {
		t.Errorf("--duration 2s became %v", c.Duration)
	}
	if c.Hold != 2*time.Second || c.Sessions != 5000 || c.Timeout != 3*time.Minute {
		t.Errorf("quick values not applied: hold %v sessions %d timeout %v", c.Hold, c.Sessions, c.Timeout)
	}
	if len(c.PeerNodes) != 1 || c.PeerNodes[0] != 3 || len(c.Clients) != 2 || c.Clients[1] != 64 {
		t.Errorf("lists: nodes %v clients %v", c.PeerNodes, c.Clients)
	}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
}

func TestParseIntList(t *testing.T) {
	got, err := parseIntList(" 1, 3,3,5 ")
	if err != nil || len(got) != 3 || got[0] != 1 || got[2] != 5 {
		t.Errorf("parseIntList = %v, %v", got, err)
	}
	for _, bad := range []string{"", "1,x", ","} {
		if _, err := parseIntList(bad); err == nil {
			t.Errorf("parseIntList(%q) accepted", bad)
		}
	}
}

func TestHelpShowsFlagsWithDefaults(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--help"}, &out, &errb); code != 0 {
		t.Fatalf("--help exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"--quick", "--out string", `(default "bench-results")`, "--nodes ints", "(default 1,3)",
		"--chubby-nodes ints", "(default 1,3,5)", "--sessions int", "(default 100000)", "--hold duration", "(default 30s)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

func TestUsageErrorsExitTwo(t *testing.T) {
	for _, args := range [][]string{{"--no-such-flag"}, {"--nodes", "4"}, {"--systems", "consul"}, {"extra-arg"}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", args, code, errb.String())
		}
	}
}
