package discovery

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// syncBuffer is a log destination shared by memberlist's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testLogger logs into a buffer that is printed if the test fails.
func testLogger(t *testing.T) *slog.Logger {
	buf := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", buf)
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func randomID(t *testing.T) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", b)
}

// nodeConfig is the Config of replica id of cell, on a free loopback port,
// joining join.
func nodeConfig(t *testing.T, cell string, id uint64, join ...string) Config {
	return Config{
		BindAddr: "127.0.0.1:0",
		Join:     join,
		Meta: Meta{
			Cell: cell, ID: id, DataID: randomID(t),
			ClientAddr: fmt.Sprintf("127.0.0.1:%d", 7000+id), PeerAddr: fmt.Sprintf("127.0.0.1:%d", 7100+id),
		},
		Logger:            testLogger(t),
		JoinRetryInterval: 20 * time.Millisecond,
		JoinRetryMax:      200 * time.Millisecond,
	}
}

func start(t *testing.T, cfg Config) *Discovery {
	t.Helper()
	d, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Shutdown(); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return d
}

// waitFor polls cond until it holds, failing the test after 15 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// peerOf returns what d knows of the member x.
func peerOf(d, x *Discovery) (Peer, bool) { return d.table.peer(x.name) }

// sees reports whether d sees each of xs in state s, with its meta and
// address.
func sees(d *Discovery, s State, xs ...*Discovery) bool {
	for _, x := range xs {
		p, ok := peerOf(d, x)
		if !ok || p.State != s || p.Meta != x.meta || p.Addr != x.Local().Addr {
			return false
		}
	}
	return true
}

// cluster starts n replicas of cell "local" joined through the first.
func cluster(t *testing.T, n int) []*Discovery {
	seed := start(t, nodeConfig(t, "local", 1))
	ds := []*Discovery{seed}
	for i := 2; i <= n; i++ {
		ds = append(ds, start(t, nodeConfig(t, "local", uint64(i), seed.Local().Addr)))
	}
	for _, d := range ds {
		waitFor(t, fmt.Sprintf("replica %d to see all", d.meta.ID), func() bool { return sees(d, Alive, ds...) })
	}
	return ds
}

func TestThreeJoinThroughOneSeed(t *testing.T) {
	seed := start(t, nodeConfig(t, "local", 1))
	changed := seed.Changed()
	ds := []*Discovery{seed}
	for i := 2; i <= 3; i++ {
		ds = append(ds, start(t, nodeConfig(t, "local", uint64(i), seed.Local().Addr)))
	}
	for _, d := range ds {
		waitFor(t, fmt.Sprintf("replica %d to see all", d.meta.ID), func() bool { return sees(d, Alive, ds...) })
	}
	select {
	case <-changed:
	default:
		t.Fatal("the seed's Changed channel was not closed by the joins")
	}
	ms := seed.Members()
	if len(ms) != 3 {
		t.Fatalf("seed lists %d members; want 3: %+v", len(ms), ms)
	}
	for i, p := range ms {
		if p.Meta != ds[i].meta || p.State != Alive || p.Since.IsZero() {
			t.Errorf("member %d: %+v; want %+v alive", i, p, ds[i].meta)
		}
	}
}

func TestLocal(t *testing.T) {
	cfg := nodeConfig(t, "local", 1)
	d := start(t, cfg)
	p := d.Local()
	host, port, err := net.SplitHostPort(p.Addr)
	if err != nil || host != "127.0.0.1" || port == "0" {
		t.Fatalf("Local().Addr = %q (%v); want 127.0.0.1 and the port picked", p.Addr, err)
	}
	if p.Meta != cfg.Meta || p.State != Alive {
		t.Fatalf("Local() = %+v; want %+v alive", p, cfg.Meta)
	}
	if got, want := p.Addr, net.JoinHostPort("127.0.0.1", strconv.Itoa(int(d.ml.LocalNode().Port))); got != want {
		t.Fatalf("Local().Addr = %s; memberlist says %s", got, want)
	}
}

// history records the states in which observer sees x, at each change.
type history struct {
	mu     sync.Mutex
	states []State
}

func watch(t *testing.T, observer, x *Discovery) *history {
	h := &history{}
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		for {
			ch := observer.Changed()
			if p, ok := peerOf(observer, x); ok {
				h.add(p.State)
			}
			select {
			case <-ch:
			case <-stop:
				return
			}
		}
	}()
	return h
}

func (h *history) add(s State) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := len(h.states); n == 0 || h.states[n-1] != s {
		h.states = append(h.states, s)
	}
}

func (h *history) get() []State {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]State(nil), h.states...)
}

func TestCrashSeenSuspectThenDead(t *testing.T) {
	ds := cluster(t, 3)
	victim, observers := ds[2], ds[:2]
	var hs []*history
	for _, o := range observers {
		hs = append(hs, watch(t, o, victim))
	}
	killed := time.Now()
	if err := victim.Shutdown(); err != nil { // no Leave: a crash
		t.Fatal(err)
	}
	for _, o := range observers {
		waitFor(t, "the crash to be seen", func() bool {
			p, _ := peerOf(o, victim)
			return p.State == Dead
		})
		p, _ := peerOf(o, victim)
		t.Logf("replica %d saw the crash after %v", o.meta.ID, p.Since.Sub(killed))
		if p.Since.Before(killed) {
			t.Errorf("replica %d: dead since %v, before the crash at %v", o.meta.ID, p.Since, killed)
		}
	}
	sawSuspect := false
	for i, h := range hs {
		// The watcher records a change when its goroutine next runs,
		// which on a busy machine can be after the table says dead.
		waitFor(t, "the watcher to record the death", func() bool {
			states := h.get()
			return len(states) > 0 && states[len(states)-1] == Dead
		})
		states := h.get()
		t.Logf("replica %d saw %v", observers[i].meta.ID, states)
		if states[0] != Alive || states[len(states)-1] != Dead {
			t.Errorf("replica %d saw %v; want alive first and dead last", observers[i].meta.ID, states)
		}
		if len(states) == 3 && states[1] == Suspect {
			sawSuspect = true
		}
	}
	if !sawSuspect { // the replica that raised the suspicion logged it
		t.Error("no replica saw the crashed one suspect before dead")
	}
	if n := len(observers[0].Members()); n != 3 {
		t.Errorf("%d members listed; want 3, the dead one kept", n)
	}
}

func TestLeaveSeenLeft(t *testing.T) {
	ds := cluster(t, 3)
	leaver, observers := ds[2], ds[:2]
	var hs []*history
	for _, o := range observers {
		hs = append(hs, watch(t, o, leaver))
	}
	if err := leaver.Leave(5 * time.Second); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if s := leaver.Local().State; s != Left {
		t.Errorf("after Leave, Local().State = %v; want left", s)
	}
	for _, o := range observers {
		waitFor(t, "the leave to be seen", func() bool {
			p, _ := peerOf(o, leaver)
			return p.State == Left
		})
	}
	if err := leaver.Shutdown(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // longer than a crash takes to be seen
	for i, h := range hs {
		if states := h.get(); len(states) != 2 || states[0] != Alive || states[1] != Left {
			t.Errorf("replica %d saw %v; want [alive left]", observers[i].meta.ID, states)
		}
	}
	if err := leaver.Leave(time.Second); !errors.Is(err, ErrStopped) {
		t.Errorf("Leave after Shutdown: %v; want ErrStopped", err)
	}
}

func TestOtherCellRefused(t *testing.T) {
	a := start(t, nodeConfig(t, "alpha", 1))
	b := start(t, nodeConfig(t, "alpha", 2, a.Local().Addr))
	x := start(t, nodeConfig(t, "beta", 3, a.Local().Addr, b.Local().Addr))
	waitFor(t, "alpha to form", func() bool { return sees(a, Alive, a, b) && sees(b, Alive, a, b) })

	// x has tried to join many times (every 200 ms at most) by now.
	time.Sleep(time.Second)
	if _, err := a.ml.Join([]string{x.Local().Addr}); err == nil {
		t.Error("alpha joined beta")
	}
	for _, d := range []*Discovery{a, b} {
		if ms := d.Members(); len(ms) != 2 {
			t.Errorf("replica %d of alpha lists %+v; want only alpha's two", d.meta.ID, ms)
		}
		if n := d.ml.NumMembers(); n != 2 {
			t.Errorf("replica %d's memberlist has %d members; want 2", d.meta.ID, n)
		}
	}
	if ms := x.Members(); len(ms) != 1 || x.ml.NumMembers() != 1 {
		t.Errorf("beta's replica lists %+v (memberlist: %d); want itself alone", ms, x.ml.NumMembers())
	}
}

// rawNode starts a bare memberlist node, without Discovery's delegates,
// whose node meta is meta.
func rawNode(t *testing.T, name string, meta []byte) *memberlist.Memberlist {
	mc := memberlist.DefaultLocalConfig()
	mc.Name, mc.BindAddr, mc.BindPort = name, "127.0.0.1", 0
	mc.ProbeInterval, mc.GossipInterval, mc.PushPullInterval = 200*time.Millisecond, 50*time.Millisecond, 200*time.Millisecond
	mc.Delegate = metaOnly(meta)
	mc.Logger = nil
	mc.LogOutput = &logWriter{l: testLogger(t)}
	ml, err := memberlist.Create(mc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ml.Shutdown() })
	return ml
}

// metaOnly is a memberlist.Delegate that only gives node meta.
type metaOnly []byte

func (m metaOnly) NodeMeta(int) []byte               { return m }
func (m metaOnly) NotifyMsg([]byte)                  {}
func (m metaOnly) GetBroadcasts(int, int) [][]byte   { return nil }
func (m metaOnly) LocalState(bool) []byte            { return nil }
func (m metaOnly) MergeRemoteState(_ []byte, _ bool) {}

func addrOf(ml *memberlist.Memberlist) string { return ml.LocalNode().Address() }

// A bare memberlist node of the cell, which accepts anyone, is a bridge
// over which strangers' alive messages reach the cell by gossip and
// push/pull rather than by a join: AliveDelegate keeps them out.
func TestStrangersGossipedByABridgeStayOut(t *testing.T) {
	a := start(t, nodeConfig(t, "alpha", 1))
	bridgeMeta := metaOf("alpha", 9, "bridge")
	bridge := rawNode(t, nodeName(bridgeMeta), mustEncode(t, bridgeMeta, false))
	if _, err := bridge.Join([]string{a.Local().Addr}); err != nil {
		t.Fatalf("bridge join: %v", err)
	}
	waitFor(t, "the bridge to be seen", func() bool {
		p, ok := a.table.peer(nodeName(bridgeMeta))
		return ok && p.State == Alive
	})
	other := metaOf("beta", 5, "other")
	strangers := []*memberlist.Memberlist{
		rawNode(t, nodeName(other), mustEncode(t, other, false)),
		rawNode(t, "junk", []byte("not a meta")),
	}
	for _, s := range strangers {
		if _, err := s.Join([]string{addrOf(bridge)}); err != nil {
			t.Fatalf("stranger join: %v", err)
		}
	}
	waitFor(t, "the bridge to know the strangers", func() bool { return bridge.NumMembers() == 4 })
	time.Sleep(time.Second) // several gossip rounds and push/pulls of the bridge
	if ms := a.Members(); len(ms) != 2 {
		t.Errorf("alpha lists %+v; want itself and the bridge", ms)
	}
	if n := a.ml.NumMembers(); n != 2 {
		t.Errorf("alpha's memberlist has %d members; want 2", n)
	}
}

// freeAddr returns a loopback address with a port that was free just now.
func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestJoinRetriedUntilSeedStarts(t *testing.T) {
	seedAddr := freeAddr(t)
	b := start(t, nodeConfig(t, "local", 2, seedAddr))
	time.Sleep(300 * time.Millisecond) // a few failed attempts
	if ms := b.Members(); len(ms) != 1 {
		t.Fatalf("before the seed started: %+v", ms)
	}
	cfg := nodeConfig(t, "local", 1)
	cfg.BindAddr = seedAddr
	a := start(t, cfg)
	waitFor(t, "the late seed to be joined", func() bool { return sees(a, Alive, a, b) && sees(b, Alive, a, b) })
}

// Every replica may be given the whole cell as its Join list, itself
// included: joining only itself does not end its retries.
func TestJoiningOnlyItselfIsNotJoining(t *testing.T) {
	aAddr, bAddr := freeAddr(t), freeAddr(t)
	aCfg := nodeConfig(t, "local", 1, aAddr, bAddr)
	aCfg.BindAddr = aAddr
	a := start(t, aCfg)
	time.Sleep(100 * time.Millisecond) // a joined itself, and failed to join b
	bCfg := nodeConfig(t, "local", 2, bAddr)
	bCfg.BindAddr = bAddr
	b := start(t, bCfg)
	waitFor(t, "a to find b", func() bool { return sees(a, Alive, a, b) && sees(b, Alive, a, b) })
}

// A seed that restarts with a wiped disk and no one to join is found again
// by the replicas that joined it before: they rejoin their Join list.
func TestRejoinFindsRestartedSeed(t *testing.T) {
	seedCfg := nodeConfig(t, "local", 1)
	seed := start(t, seedCfg)
	var others []*Discovery
	for i := 2; i <= 3; i++ {
		cfg := nodeConfig(t, "local", uint64(i), seed.Local().Addr)
		cfg.RejoinInterval = 200 * time.Millisecond
		others = append(others, start(t, cfg))
	}
	all := append([]*Discovery{seed}, others...)
	waitFor(t, "the cell to form", func() bool { return sees(seed, Alive, all...) })

	seedCfg.BindAddr = seed.Local().Addr
	if err := seed.Shutdown(); err != nil {
		t.Fatal(err)
	}
	for _, o := range others {
		waitFor(t, "the seed's death", func() bool { p, _ := peerOf(o, seed); return p.State == Dead })
	}
	seedCfg.Meta.DataID = randomID(t) // a new disk
	seedCfg.Logger = testLogger(t)
	seed2 := start(t, seedCfg)
	all = append([]*Discovery{seed2}, others...)
	for _, d := range all {
		waitFor(t, "the new seed and the others to meet", func() bool { return sees(d, Alive, all...) })
	}
	if p, _ := peerOf(others[0], seed); p.State != Dead {
		t.Errorf("the old seed is %v; want still dead", p.State)
	}
}

func TestUpdateMetaPropagates(t *testing.T) {
	ds := cluster(t, 2)
	a, b := ds[0], ds[1]
	changed := a.Changed()
	m := b.meta
	m.ClientAddr, m.Spare = "127.0.0.1:9999", true
	if err := b.UpdateMeta(m, 5*time.Second); err != nil {
		t.Fatalf("UpdateMeta: %v", err)
	}
	if b.Local().Meta != m {
		t.Fatalf("Local().Meta = %+v; want %+v", b.Local().Meta, m)
	}
	waitFor(t, "the update to reach a", func() bool { p, _ := peerOf(a, b); return p.Meta == m && p.State == Alive })
	select {
	case <-changed:
	default:
		t.Error("Changed not closed by the update")
	}

	for _, bad := range []func(*Meta){
		func(m *Meta) { m.ID++ },
		func(m *Meta) { m.Cell = "other" },
		func(m *Meta) { m.DataID = "new" },
		func(m *Meta) { m.PeerAddr = "nowhere" },
	} {
		m2 := m
		bad(&m2)
		var me *MetaError
		if err := b.UpdateMeta(m2, time.Second); !errors.As(err, &me) {
			t.Errorf("UpdateMeta(%+v): %v; want a *MetaError", m2, err)
		}
	}
	if b.Local().Meta != m {
		t.Errorf("a refused update changed the meta to %+v", b.Local().Meta)
	}
	if err := b.Leave(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := b.UpdateMeta(m, time.Second); !errors.Is(err, ErrStopped) {
		t.Errorf("UpdateMeta after Leave: %v; want ErrStopped", err)
	}
}

func TestStartErrors(t *testing.T) {
	good := nodeConfig(t, "local", 1)
	busy := start(t, nodeConfig(t, "local", 2))
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		edit func(*Config)
		is   error
	}{
		{"bad meta", context.Background(), func(c *Config) { c.Meta.ID = 0 }, nil},
		{"hostname bind", context.Background(), func(c *Config) { c.BindAddr = "localhost:0" }, nil},
		{"advertise port 0", context.Background(), func(c *Config) { c.AdvertiseAddr = "127.0.0.1:0" }, nil},
		{"negative interval", context.Background(), func(c *Config) { c.ProbeInterval = -1 }, nil},
		{"timeout over interval", context.Background(), func(c *Config) { c.ProbeTimeout = time.Second }, nil},
		{"port in use", context.Background(), func(c *Config) { c.BindAddr = busy.Local().Addr }, nil},
		{"cancelled", cancelled, func(*Config) {}, context.Canceled},
	} {
		cfg := good
		tc.edit(&cfg)
		d, err := Start(tc.ctx, cfg)
		if err == nil {
			d.Shutdown()
			t.Errorf("%s: Start succeeded", tc.name)
		} else if tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("%s: %v; want %v", tc.name, err, tc.is)
		}
	}
	var me *MetaError
	cfg := good
	cfg.Meta.Cell = ""
	if _, err := Start(context.Background(), cfg); !errors.As(err, &me) || me.Field != "Cell" {
		t.Errorf("Start with no cell: %v; want a *MetaError about Cell", err)
	}
}

// A replica restarted on its disk has its former name: memberlist's
// refutation brings that member back from the dead.
func TestRestartOnSameDiskComesBack(t *testing.T) {
	ds := cluster(t, 2)
	a, b := ds[0], ds[1]
	cfg := b.cfg
	cfg.BindAddr, cfg.Logger = b.Local().Addr, testLogger(t)
	if err := b.Shutdown(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the crash to be seen", func() bool { p, _ := peerOf(a, b); return p.State == Dead })
	restarted := time.Now()
	b2 := start(t, cfg)
	if b2.name != b.name {
		t.Fatalf("restarted as %q; was %q", b2.name, b.name)
	}
	waitFor(t, "the restarted replica to be seen", func() bool { return sees(a, Alive, a, b2) && sees(b2, Alive, a, b2) })
	if p, _ := peerOf(a, b2); p.Since.Before(restarted) {
		t.Errorf("alive since %v, before the restart at %v", p.Since, restarted)
	}
	if n := len(a.Members()); n != 2 {
		t.Errorf("%d members; want 2", n)
	}
}

// TestDeadMemberReachedAgain: a member this node has dead is joined again
// once it answers, though it names nobody to join: as after a partition
// heals, when each side has the other dead, memberlist probes no dead
// member, and the news of the death was gossiped long ago. Without it the
// member stays dead here until a rejoin of the Join list (30 s), if ever.
func TestDeadMemberReachedAgain(t *testing.T) {
	acfg := nodeConfig(t, "local", 1)
	acfg.ReconnectInterval = 100 * time.Millisecond
	a := start(t, acfg)
	bcfg := nodeConfig(t, "local", 2, a.Local().Addr)
	b := start(t, bcfg)
	waitFor(t, "the two to meet", func() bool { return sees(a, Alive, a, b) && sees(b, Alive, a, b) })
	bcfg.BindAddr, bcfg.Join, bcfg.Logger = b.Local().Addr, nil, testLogger(t)
	if err := b.Shutdown(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b's death", func() bool { p, _ := peerOf(a, b); return p.State == Dead })
	time.Sleep(time.Second) // the news of the death is gossiped out
	b2 := start(t, bcfg)
	// Bounded by a few reconnect rounds, far below the rejoin's 30 s.
	deadline := time.Now().Add(20 * acfg.ReconnectInterval)
	for !(sees(a, Alive, a, b2) && sees(b2, Alive, a, b2)) {
		if time.Now().After(deadline) {
			p, _ := peerOf(a, b2)
			t.Fatalf("b is %v on a %v after it came back", p.State, 20*acfg.ReconnectInterval)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
