package cell

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/replica/vr"
)

// tcpGate forwards every connection it accepts to target while it is open;
// cutting it closes the connections it carries and refuses new ones until
// it is opened again: a network partition of one replica's peer port.
type tcpGate struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
}

func newTCPGate(t testing.TB, target string) *tcpGate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &tcpGate{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go g.serve()
	t.Cleanup(func() {
		ln.Close()
		g.setCut(true)
	})
	return g
}

func (g *tcpGate) addr() string { return g.ln.Addr().String() }

func (g *tcpGate) serve() {
	for {
		in, err := g.ln.Accept()
		if err != nil {
			return
		}
		go g.forward(in)
	}
}

// forward carries one connection to the target, unless the gate is cut.
func (g *tcpGate) forward(in net.Conn) {
	if !g.track(in) {
		in.Close()
		return
	}
	out, err := net.DialTimeout("tcp", g.target, time.Second)
	if err != nil || !g.track(out) {
		in.Close()
		if out != nil {
			out.Close()
		}
		return
	}
	go func() { _, _ = io.Copy(out, in); out.Close(); in.Close() }()
	_, _ = io.Copy(in, out)
	in.Close()
	out.Close()
}

// track remembers c so that a cut closes it; false when the gate is cut.
func (g *tcpGate) track(c net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cut {
		return false
	}
	g.conns[c] = struct{}{}
	return true
}

func (g *tcpGate) setCut(cut bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cut = cut
	if cut {
		for c := range g.conns {
			c.Close()
		}
		clear(g.conns)
	}
}

// startGatedCell is startMultiCell with each replica's peer port behind a
// tcpGate: the others reach replica i+1 only through gates[i].
func startGatedCell(t *testing.T, n int, cfg Config) (*multiCell, []*tcpGate) {
	t.Helper()
	var lns, pls []net.Listener
	var peers []Peer
	var gates []*tcpGate
	for i := 1; i <= n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		pl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		g := newTCPGate(t, pl.Addr().String())
		lns, pls, gates = append(lns, ln), append(pls, pl), append(gates, g)
		peers = append(peers, Peer{ID: uint64(i), Addr: ln.Addr().String(), PeerAddr: g.addr()})
	}
	return startServers(t, cfg, peers, lns, pls), gates
}

// TestRemoveMemberAnswersOnCommit: RemoveMember on a master cut off from
// the others (the change is proposed and cannot commit) does not say the
// replica was removed: it answers UNAVAILABLE "outcome unknown: …" before
// the caller's deadline. After the heal the cell has a master again, and
// a removal on a healthy cell answers only once the change has committed.
func TestRemoveMemberAnswersOnCommit(t *testing.T) {
	// Timers long enough that the cut-off master is still the master when
	// the call arrives on a busy machine (it steps down a lease plus a
	// view-change timeout after it last heard a majority: ~2.5 s).
	mc, gates := startGatedCell(t, 3, Config{Replication: vr.Config{ViewChangeTimeout: 1500 * time.Millisecond, LeaseDuration: time.Second}})
	m := mc.master()
	victim := uint64(1)
	if m.cfg.ID == victim {
		victim = 2
	}
	const callTimeout = 3 * time.Second
	c, err := client.Connect(ctx, client.Config{Addrs: []string{m.Addr()}, CallTimeout: callTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.GetMaster(ctx); err != nil {
		t.Fatal(err)
	}

	for _, g := range gates {
		g.setCut(true)
	}
	start := time.Now()
	index, err := c.RemoveMember(ctx, strconv.FormatUint(victim, 10))
	took := time.Since(start)
	if err == nil {
		t.Fatalf("RemoveMember(%d) on a master cut off from the others answered \"removed\" (index %d): its change cannot have committed (the master's log: %+v)",
			victim, index, m.log.Info())
	}
	var ce *chubby.ChubbyError
	if !errors.As(err, &ce) || ce.Code != chubby.ErrorCode_UNAVAILABLE || !strings.HasPrefix(ce.Message, outcomeUnknown) {
		t.Fatalf("RemoveMember on a cut-off master after %v: %v; want UNAVAILABLE %q… before the call's %v timeout", took, err, outcomeUnknown, callTimeout)
	}
	t.Logf("cut-off master answered after %v: %s", took, client.Describe(err))

	for _, g := range gates {
		g.setCut(false)
	}
	healed := awaitSettled(t, mc)
	t.Logf("after the heal: replica %d voters %v (replica %d removed: %v)", healed.cfg.ID, healed.log.Info().Members.Voters(),
		victim, !healed.log.Info().Members.Contains(victim))

	// The normal path: answered once committed.
	healthy, err := client.Connect(ctx, client.Config{Addrs: []string{mc.servers[0].Addr(), mc.servers[1].Addr(), mc.servers[2].Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer healthy.Close()
	var x uint64
	for _, id := range healed.log.Info().Members.Voters() {
		if id != healed.cfg.ID {
			x = id
			break
		}
	}
	index, err = healthy.RemoveMember(ctx, strconv.FormatUint(x, 10))
	if err != nil {
		t.Fatalf("RemoveMember(%d) on a healthy cell: %v", x, err)
	}
	if info := healed.log.Info(); info.Commit < uint64(index) || info.Members.Contains(x) {
		t.Fatalf("RemoveMember(%d) answered index %d before it committed on the master: commit %d, members %+v", x, index, info.Commit, info.Members)
	}
}

// awaitSettled waits (bounded) for a serving master with no configuration
// change pending.
func awaitSettled(t *testing.T, mc *multiCell) *Server {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, s := range mc.servers {
			if i := s.log.Info(); s.IsMaster() && i.PendingConfig == 0 {
				return s
			}
		}
	}
	t.Fatal("no settled master within 60 s of the heal")
	return nil
}

func TestAnswerBy(t *testing.T) {
	now := time.Now()
	dl := func(d time.Duration) context.Context {
		c, cancel := context.WithDeadline(context.Background(), now.Add(d))
		t.Cleanup(cancel)
		return c
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want time.Duration
	}{
		{"no deadline", context.Background(), configCommitWait},
		{"deadline far", dl(time.Minute), configCommitWait},
		{"10 s deadline: the bound first", dl(10 * time.Second), configCommitWait},
		{"5.5 s deadline: a second before", dl(5500 * time.Millisecond), 4500 * time.Millisecond},
		{"3 s deadline: a fifth before", dl(3 * time.Second), 2400 * time.Millisecond},
	} {
		if got := answerBy(tc.ctx, now, configCommitWait).Sub(now); got != tc.want {
			t.Errorf("%s: answerBy in %v, want %v", tc.name, got, tc.want)
		}
	}
}
