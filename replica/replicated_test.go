package replica

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os/exec"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/cloudwego/kitex/server"

	"github.com/chubbygo/chubby/replica/vr"
)

// testReplica is one replica of a loopback cell: storage on disk, the
// Kitex peer transport, a hash-chain state machine.
type testReplica struct {
	id   uint64
	dir  string
	st   *Storage
	sm   *chainSM
	r    *Replicated
	tr   *PeerTransport
	srv  server.Server
	addr string
}

type testCluster struct {
	t       *testing.T
	snap    uint64 // SnapshotEvery; default 50
	members vr.Members
	peers   map[uint64]string
	reps    map[uint64]*testReplica
	// held keeps a stopped replica's port, listened on at once by stop,
	// for its restart: other tests pick ports from the same range, and one
	// took a port while its replica was down (CI, 2026-12-01).
	held map[uint64]net.Listener
}

// listenRestartable listens on a free loopback port below the kernel's
// ephemeral range (32768 and up here), so that a replica restarted on it
// finds it free: a port from the ephemeral range may meanwhile have become
// the local port of some outgoing connection, of this process or another,
// and then stays taken for as long as that connection lives (CI,
// 2026-12-01: "bind: address already in use" after 2 s of retries).
func listenRestartable(t *testing.T) net.Listener {
	t.Helper()
	for range 100 {
		port := 20000 + rand.IntN(12000)
		if ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			return ln
		}
	}
	t.Fatal("no free port in 20000..31999")
	return nil
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newTestCluster(t *testing.T, n int) *testCluster {
	c := &testCluster{t: t, peers: map[uint64]string{}, reps: map[uint64]*testReplica{}, held: map[uint64]net.Listener{}}
	lns := map[uint64]net.Listener{}
	for i := 1; i <= n; i++ {
		ln := listenRestartable(t)
		id := uint64(i)
		lns[id] = ln
		c.peers[id] = ln.Addr().String()
		c.members = append(c.members, vr.Member{ID: id, ClientAddr: "client-" + fmt.Sprint(id)})
	}
	for id, ln := range lns {
		c.start(id, t.TempDir(), ln)
	}
	t.Cleanup(func() {
		for id := range c.reps {
			c.stop(id)
		}
	})
	return c
}

func (c *testCluster) start(id uint64, dir string, ln net.Listener) {
	t := c.t
	if ln == nil && c.held[id] != nil {
		ln = c.held[id]
		delete(c.held, id)
	}
	if ln == nil {
		var err error
		// The old port may linger for a moment after the server stopped
		// (the one cause found, a Stop that Kitex lost while Run was still
		// starting, is fixed in rpc.NewServer): try for 10 s, collecting
		// garbage in between, and say who holds the port if it stays taken.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if ln, err = net.Listen("tcp", c.peers[id]); err == nil {
				break
			}
			if time.Now().After(deadline) {
				out, _ := exec.Command("ss", "-tanp").CombinedOutput()
				t.Fatalf("%v; sockets:\n%s", err, out)
			}
			runtime.GC()
		}
	}
	st, err := OpenStorage(dir, StorageOptions{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewPeerTransport("test", id, c.peers, quiet(), nil)
	if err != nil {
		t.Fatal(err)
	}
	sm := &chainSM{sums: map[uint64][32]byte{}}
	r, err := StartReplicated(st, sm, tr, ReplicatedConfig{ID: id, Members: c.members, Logger: quiet(), SnapshotEvery: cmp.Or(c.snap, 50)})
	if err != nil {
		t.Fatal(err)
	}
	tr.SetReceiver(r.Receive)
	srv, err := NewPeerServer(PeerServerConfig{Cell: "test", Listener: ln, Logger: quiet(), Deliver: r.Receive, Transport: tr,
		Known: func(x uint64) bool { _, ok := c.peers[x]; return ok }})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Run()
	c.reps[id] = &testReplica{id: id, dir: dir, st: st, sm: sm, r: r, tr: tr, srv: srv, addr: c.peers[id]}
}

func (c *testCluster) stop(id uint64) {
	rep := c.reps[id]
	if rep == nil {
		return
	}
	rep.srv.Stop()
	rep.tr.Close()
	rep.r.Close()
	rep.st.Close()
	delete(c.reps, id)
	for i := 0; i < 50 && c.held[id] == nil; i++ { // the old socket may linger for a moment
		if ln, err := net.Listen("tcp", c.peers[id]); err == nil {
			c.held[id] = ln
			c.t.Cleanup(func() { ln.Close() })
		} else {
			runtime.GC()
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// primary waits (bounded) for a replica that is the normal primary.
func (c *testCluster) primary() *testReplica {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, rep := range c.reps {
			if rep.r.Info().IsPrimary && rep.r.CanServeReads() {
				return rep
			}
		}
	}
	c.t.Fatal("no primary within 10s")
	return nil
}

// propose retries through view changes until the entry commits.
func (c *testCluster) propose(data string) {
	for attempt := 0; attempt < 200; attempt++ {
		p := c.primary()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := p.r.Propose(ctx, []byte(data))
		cancel()
		if err == nil {
			return
		}
		var nm *NotMasterError
		if !errors.As(err, &nm) && !errors.Is(err, ErrUnknownOutcome) && !errors.Is(err, context.DeadlineExceeded) {
			c.t.Fatalf("propose %q: %v", data, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatalf("propose %q never committed", data)
}

// TestReplicatedFailover: three replicas over real Kitex on loopback; the
// primary is stopped twice (and restarted from its disk); every replica
// ends with the same applied log, and writes continue after each failover.
func TestReplicatedFailover(t *testing.T) {
	c := newTestCluster(t, 3)
	n := 0
	write := func(k int) {
		for i := 0; i < k; i++ {
			c.propose(fmt.Sprintf("w%d", n))
			n++
		}
	}
	write(120) // crosses SnapshotEvery: snapshots and truncation happen
	for round := 0; round < 2; round++ {
		old := c.primary()
		dir := old.dir
		c.stop(old.id)
		start := time.Now()
		write(1)
		t.Logf("round %d: replica %d stopped; next write committed after %v", round, old.id, time.Since(start))
		write(60)
		c.start(old.id, dir, nil) // back from its disk; catches up
	}
	write(10)
	// All replicas converge on the same applied log (bounded wait): the
	// chain hash at the primary's last applied index agrees everywhere.
	final := c.primary().r.Applied()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		done := true
		for _, rep := range c.reps {
			if rep.r.Applied() < final {
				done = false
			}
		}
		if done {
			var want [32]byte
			for i, rep := range c.reps {
				got, ok := rep.sm.sumAt(final)
				if !ok {
					t.Fatalf("replica %d has no state at %d", i, final)
				}
				if want == ([32]byte{}) {
					want = got
				} else if got != want {
					t.Fatalf("replica %d's state at %d differs", i, final)
				}
			}
			if n := c.reps[1].sm.commands(); n < 190 {
				t.Fatalf("only %d commands applied", n)
			}
			return
		}
		if time.Now().After(deadline) {
			for _, rep := range c.reps {
				t.Logf("replica %d applied %d info %+v", rep.id, rep.r.Applied(), rep.r.Info())
			}
			t.Fatalf("replicas did not converge on %d commands", n)
		}
	}
}

// A backup that was down while the cell committed large entries catches
// up by Prepares as large as the protocol allows (MaxPrepareBytes of
// 256 KiB entries: more than the 4 MiB a client call carried by default).
func TestReplicatedCatchUpLargeEntries(t *testing.T) {
	c := newTestCluster(t, 3)
	c.snap = 1 << 30 // by the log, not a snapshot
	for id := range c.reps {
		dir := c.reps[id].dir
		c.stop(id)
		c.start(id, dir, nil)
	}
	c.propose("first")
	behind := c.reps[3]
	if c.primary().id == 3 {
		behind = c.reps[1]
	}
	id, dir := behind.id, behind.dir
	c.stop(id)
	big := bytes.Repeat([]byte("0123456789abcdef"), 256<<10/16-8)
	for i := range 64 {
		c.propose(fmt.Sprintf("%03d%s", i, big))
	}
	target := c.primary().r.Applied()
	c.start(id, dir, nil)
	// What is checked is that entries this large reach the backup at all
	// (a Prepare over a transport limit would stall it for good), not how
	// fast: 16 MiB through Badger under -race takes 5–10 s on an idle
	// 2-core machine and over 20 s beside a CPU hog, so the bound is
	// generous.
	const bound = 90 * time.Second
	for deadline := time.Now().Add(bound); c.reps[id].r.Applied() < target; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("replica %d applied %d of %d in %v", id, c.reps[id].r.Applied(), target, bound)
		}
	}
}

// chainSM hashes every command it applies into a chain; a snapshot is the
// chain so far. Every index's chain value is kept so replicas can be
// compared at the same index.
type chainSM struct {
	mu   sync.Mutex
	sum  [32]byte
	n    int
	sums map[uint64][32]byte
}

func (c *chainSM) Apply(index uint64, e []byte) any {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sum = sha256.Sum256(append(c.sum[:], e...))
	c.n++
	c.sums[index] = c.sum
	return index
}

func (c *chainSM) Snapshot() func() ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := binary.BigEndian.AppendUint64(append([]byte(nil), c.sum[:]...), uint64(c.n))
	return func() ([]byte, error) { return b, nil }
}

func (c *chainSM) Restore(index uint64, b []byte) error {
	if len(b) != 40 {
		return fmt.Errorf("bad snapshot of %d bytes", len(b))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	copy(c.sum[:], b)
	c.n = int(binary.BigEndian.Uint64(b[32:]))
	c.sums[index] = c.sum
	return nil
}

func (c *chainSM) sumAt(i uint64) ([32]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.sums[i]
	return s, ok
}

func (c *chainSM) commands() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// TestProposeInView: a command prepared under one view goes into the log
// only if its replica is still the primary of that view when the loop
// takes it; otherwise it is refused with NotMasterError and never
// proposed.
func TestProposeInView(t *testing.T) {
	c := newTestCluster(t, 3)
	p := c.primary()
	view := p.r.Info().View
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := p.r.ProposeInView(ctx, view, []byte("in-view")); err != nil {
		t.Fatalf("a proposal in the primary's view: %v", err)
	}
	before := p.r.Info().LastOp
	_, err := p.r.ProposeInView(ctx, view+1, []byte("other-view"))
	var nm *NotMasterError
	if !errors.As(err, &nm) {
		t.Fatalf("a proposal for another view: %v, want NotMasterError", err)
	}
	if after := p.r.Info().LastOp; after != before {
		t.Fatalf("the refused proposal reached the log: last op %d → %d", before, after)
	}
}
