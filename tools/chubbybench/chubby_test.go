package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestChubbydCommandLines(t *testing.T) {
	one := replicas("/d", []string{"127.0.0.1:7000"}, nil)
	got := chubbydArgs("bin/chubbyd", one[0], one)
	want := []string{"bin/chubbyd", "serve", "--id", "1", "--listen", "127.0.0.1:7000", "--data", "/d/r1", "--http", "", "--log-level", "warn"}
	if !slices.Equal(got, want) {
		t.Errorf("one replica:\n got %q\nwant %q", got, want)
	}
	one[0].HTTP = "127.0.0.1:7200"
	got = chubbydArgs("bin/chubbyd", one[0], one)
	want = []string{"bin/chubbyd", "serve", "--id", "1", "--listen", "127.0.0.1:7000", "--data", "/d/r1", "--http", "127.0.0.1:7200", "--log-level", "warn"}
	if !slices.Equal(got, want) {
		t.Errorf("one replica:\n got %q\nwant %q", got, want)
	}

	three := replicas("/d", []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"},
		[]string{"127.0.0.1:7100", "127.0.0.1:7101", "127.0.0.1:7102"})
	got = chubbydArgs("chubbyd", three[1], three, "--max-connections", "19500")
	joined := strings.Join(got, " ")
	for _, want := range []string{
		"serve --id 2 --listen 127.0.0.1:7001 --data /d/r2",
		"--peers 1=127.0.0.1:7000/127.0.0.1:7100,2=127.0.0.1:7001/127.0.0.1:7101,3=127.0.0.1:7002/127.0.0.1:7102",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("replica 2 of 3: %q lacks %q", joined, want)
		}
	}
	if got[len(got)-2] != "--max-connections" {
		t.Errorf("extra flags must come last (they override): %q", got)
	}
	// Every replica gets the same --peers, whatever the order of the list.
	rev := slices.Clone(three)
	slices.Reverse(rev)
	if peerList(rev) != peerList(three) {
		t.Errorf("peerList depends on order: %q vs %q", peerList(rev), peerList(three))
	}
}

func TestHasPeersFlag(t *testing.T) {
	today := `serve runs one replica. A cell of one replica is its own master.
(Replication across 3 or 5 replicas, with --peers, is not built yet.)

Flags:
      --id string             this replica's id (default "r1")
      --listen string         client RPC address (host:port) (default "127.0.0.1:7000")
`
	if hasPeersFlag(today) {
		t.Error("a mention of --peers in the prose is not the flag")
	}
	later := today + "      --peers string          the cell's replicas: id=CLIENT_ADDR[/PEER_ADDR],...\n"
	if !hasPeersFlag(later) {
		t.Error("the --peers flag line was not recognised")
	}
}

func TestChubbyUnavailableAndNA(t *testing.T) {
	e := &env{cfg: &Config{}}
	if why := newChubbySystem(e, 3, "bin/chubbyd", false, nil).Unavailable(); !strings.Contains(why, "not available yet") {
		t.Errorf("3 replicas without --peers: %q", why)
	}
	if why := newChubbySystem(e, 3, "bin/chubbyd", true, nil).Unavailable(); why != "" {
		t.Errorf("3 replicas with --peers: %q", why)
	}
	one := newChubbySystem(e, 1, "bin/chubbyd", false, nil)
	if one.Unavailable() != "" {
		t.Errorf("one replica: %q", one.Unavailable())
	}
	if why := one.NA(Workload{Kind: kindReadCached, Clients: 1}); why != "" {
		t.Errorf("read-cached: %q", why)
	}
	if why := one.NA(Workload{Kind: kindFailover}); !strings.Contains(why, "until replication") {
		t.Errorf("failover on one replica: %q", why)
	}
	if why := one.NA(Workload{Kind: kindLockDistinct, Clients: 64}); why != "" {
		t.Errorf("lock-distinct: %q", why)
	}
	one.prepare(Workload{Kind: kindSessionsHeld, Variant: variantDirect})
	if !slices.Contains(one.extra, "--max-connections") {
		t.Errorf("direct sessions run without raised --max-connections: %q", one.extra)
	}
	one.prepare(Workload{Kind: kindLockDistinct, Clients: 1})
	if one.extra != nil {
		t.Errorf("extra flags left over: %q", one.extra)
	}
}

func TestZooKeeperConfig(t *testing.T) {
	cfg := zkConfig("/d/z1", 2181, []string{"server.1=127.0.0.1:2888:3888"})
	for _, want := range []string{"maxClientCnxns=0", "admin.enableServer=false", "clientPort=2181", "dataDir=/d/z1", "server.1=127.0.0.1:2888:3888", "4lw.commands.whitelist=srvr"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("zoo.cfg lacks %q:\n%s", want, cfg)
		}
	}
}

func TestWorkloadSelection(t *testing.T) {
	all := workloads([]int{1, 16, 64})
	var names []string
	for _, w := range all {
		names = append(names, w.Name())
	}
	for _, want := range []string{"lock-distinct/1", "lock-distinct/64", "lock-contended/1", "lock-contended/16", "write/64", "read/1",
		"read-cached/64", "session-create/16", "failover", "sessions-held/batched", "sessions-held/direct",
		"transfer-spread/1", "transfer-spread/16", "transfer-spread/64", "transfer-hot/16", "transfer-hot/64"} {
		if !slices.Contains(names, want) {
			t.Errorf("workloads lack %s: %v", want, names)
		}
	}
	if slices.Contains(names, "transfer-hot/1") {
		t.Error("transfer-hot/1 runs: one client contends with nobody")
	}
	for _, w := range all {
		if back := workloadByName(w.Name()); back.Name() != w.Name() {
			t.Errorf("workloadByName(%q) = %+v", w.Name(), back)
		}
	}
	if w := workloadByName("no/such"); w.Kind != "" {
		t.Errorf("workloadByName of nonsense = %+v", w)
	}
	quick := selectWorkloads(all, true, nil)
	var quickTxn []string
	for _, w := range quick {
		if w.Name() == "lock-contended/1" {
			t.Error("--quick runs lock-contended/1 (the same as lock-distinct/1)")
		}
		if w.isTxn() {
			quickTxn = append(quickTxn, w.Name())
		}
	}
	if want := []string{"transfer-spread/16", "transfer-hot/16"}; !slices.Equal(quickTxn, want) {
		t.Errorf("--quick runs transfers %v, want %v", quickTxn, want)
	}
	// Other client counts: --quick still runs each transfer workload once.
	for _, cs := range [][]int{{1, 64}, {1}, {4, 8, 32}} {
		var got []string
		for _, w := range selectWorkloads(workloads(cs), true, nil) {
			if w.isTxn() {
				got = append(got, w.Name())
			}
		}
		want := map[string][]string{"[1 64]": {"transfer-spread/1", "transfer-hot/64"}, "[1]": {"transfer-spread/1"},
			"[4 8 32]": {"transfer-spread/8", "transfer-hot/8"}}[fmt.Sprint(cs)]
		if !slices.Equal(got, want) {
			t.Errorf("--quick --clients %v runs transfers %v, want %v", cs, got, want)
		}
	}
	if w := workloadByName("transfer-hot/16"); !w.isTxn() || !w.isLoad() || w.accounts() != hotAccounts {
		t.Errorf("transfer-hot/16 = %+v", w)
	}
	if w := workloadByName("transfer-spread/1"); w.accounts() != spreadAccounts {
		t.Errorf("transfer-spread/1 has %d accounts", w.accounts())
	}
	only := selectWorkloads(all, false, []string{"lock-distinct", "failover"})
	if len(only) != 4 {
		t.Errorf("--workloads lock-distinct,failover selected %d workloads", len(only))
	}
}
