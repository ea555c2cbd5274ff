package celltest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell"
)

// Replicas is a replicated cell of in-process replicas on loopback: one
// cell.Server per replica, each with its data in a temporary directory,
// stopped when the test ends.
type Replicas struct {
	t       testing.TB
	mu      sync.Mutex
	servers []*cell.Server
	stops   []func()
}

// NewReplicas returns an empty cell; Add starts its replicas.
func NewReplicas(t testing.TB) *Replicas { return &Replicas{t: t} }

// StartStatic starts a cell of n replicas (ids 1..n) given their
// configuration up front (cell.Config.Peers, chubbyd's --peers).
func StartStatic(t testing.TB, n int) *Replicas {
	t.Helper()
	return StartStaticWith(t, n, nil)
}

// StartStaticWith is StartStatic with each replica's configuration passed
// through with (if not nil) before it starts, e.g. to give it TLS.
func StartStaticWith(t testing.TB, n int, with func(cfg *cell.Config)) *Replicas {
	t.Helper()
	var lns, pls []net.Listener
	var peers []cell.Peer
	for i := 1; i <= n; i++ {
		ln, pl := Listen(t), Listen(t)
		lns, pls = append(lns, ln), append(pls, pl)
		peers = append(peers, cell.Peer{ID: uint64(i), Addr: ln.Addr().String(), PeerAddr: pl.Addr().String()})
	}
	rc := NewReplicas(t)
	for i := range n {
		cfg := cell.Config{ID: uint64(i + 1), Peers: peers, Listener: lns[i], PeerListener: pls[i]}
		if with != nil {
			with(&cfg)
		}
		rc.Add(cfg)
	}
	return rc
}

// Listen returns a listener on a free loopback port.
func Listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// Add starts one more replica with cfg (DataDir and Logger filled in) and
// returns its index.
func (rc *Replicas) Add(cfg cell.Config) int {
	rc.t.Helper()
	cfg.DataDir = rc.t.TempDir()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := cell.New(cfg)
	if err != nil {
		rc.t.Fatalf("start replica %d: %v", cfg.ID, err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background()) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			s.Stop()
			select {
			case <-done:
			case <-time.After(time.Minute):
				rc.t.Errorf("replica at %s did not stop within a minute", s.Addr())
			}
		})
	}
	rc.t.Cleanup(stop)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.servers, rc.stops = append(rc.servers, s), append(rc.stops, stop)
	return len(rc.servers) - 1
}

// Server returns replica i.
func (rc *Replicas) Server(i int) *cell.Server {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.servers[i]
}

// Addr returns replica i's client address.
func (rc *Replicas) Addr(i int) string { return rc.Server(i).Addr() }

// Addrs returns every replica's client address, in the order added.
func (rc *Replicas) Addrs() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []string
	for _, s := range rc.servers {
		out = append(out, s.Addr())
	}
	return out
}

// Stop stops replica i (Leave, then shutdown), once.
func (rc *Replicas) Stop(i int) {
	rc.mu.Lock()
	stop := rc.stops[i]
	rc.mu.Unlock()
	stop()
}

// Master waits (bounded: 20 s) for a serving master among the replicas not
// in except and returns its index.
func (rc *Replicas) Master(except ...int) int {
	rc.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		rc.mu.Lock()
		servers := slices.Clone(rc.servers)
		rc.mu.Unlock()
		for i, s := range servers {
			if !slices.Contains(except, i) && s.IsMaster() {
				return i
			}
		}
	}
	rc.t.Fatal("no master within 20s")
	return -1
}
