package cell

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/replica"
	"github.com/chubbygo/chubby/replica/vr"
)

// diskCell is a cell of replicas on data directories that a test stops
// and starts again on the same addresses.
type diskCell struct {
	t       *testing.T
	peers   []Peer
	dirs    []string
	servers []*Server
	dones   []chan error
}

func newDiskCell(t *testing.T, n int) *diskCell {
	peers, lns, pls := loopbackPeers(t, n)
	dc := &diskCell{t: t, peers: peers, dirs: make([]string, n), servers: make([]*Server, n), dones: make([]chan error, n)}
	for i := range n {
		dc.dirs[i] = t.TempDir()
		dc.start(i, lns[i], pls[i])
	}
	t.Cleanup(dc.stopAll)
	return dc
}

// start starts replica i on its directory; nil listeners listen on its
// addresses again.
func (dc *diskCell) start(i int, ln, pl net.Listener) {
	t := dc.t
	t.Helper()
	var err error
	if ln == nil {
		if ln, err = net.Listen("tcp", dc.peers[i].Addr); err != nil {
			t.Fatal(err)
		}
		if pl, err = net.Listen("tcp", dc.peers[i].PeerAddr); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := New(Config{ID: uint64(i + 1), Peers: dc.peers, Listener: ln, PeerListener: pl, DataDir: dc.dirs[i], Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background()) }()
	dc.servers[i], dc.dones[i] = srv, done
}

func (dc *diskCell) stopAll() {
	for i, srv := range dc.servers {
		if srv == nil {
			continue
		}
		srv.Stop()
		select {
		case err := <-dc.dones[i]:
			if err != nil {
				dc.t.Errorf("replica %d: %v", i+1, err)
			}
		case <-time.After(time.Minute):
			dc.t.Fatalf("replica %d did not stop within a minute", i+1)
		}
		dc.servers[i] = nil
	}
}

// writeHardState overwrites the hard state in a stopped replica's
// directory, as a release before the view checks could have left it.
func writeHardState(t *testing.T, dir string, view, lastNormal, commit uint64) {
	t.Helper()
	st, err := replica.OpenStorage(dir, replica.StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b := binary.BigEndian.AppendUint64(nil, view) // the layout of replica's hard state record
	b = binary.BigEndian.AppendUint64(b, lastNormal)
	b = binary.BigEndian.AppendUint64(b, commit)
	if err := st.SetMeta("vr/hardstate", b); err != nil {
		t.Fatal(err)
	}
}

// TestExportRecoversACellStuckAtTheEndOfAnEpoch: a three-replica cell
// whose disks all say "the last view of epoch 0" (what a forged message
// could do to releases before the view checks) cannot elect a master when
// it restarts, and every replica says why on /healthz. chubbyd export of
// the most complete log and chubbyd restore of every replica from it give
// a new cell that elects a master, holds every acknowledged write and
// takes new ones.
func TestExportRecoversACellStuckAtTheEndOfAnEpoch(t *testing.T) {
	dc := newDiskCell(t, 3)
	mc := &multiCell{t: t, servers: dc.servers}
	m := mc.master()
	cli := newRawClient(t, m.Addr())
	r, err := cli.CreateSession(ctx, &chubby.CreateSessionRequest{ClientName: "w"})
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	const files = 40
	for i := range files {
		p := fmt.Sprintf("/data/f%d", i)
		if _, err := cli.CreateFile(ctx, &chubby.CreateFileRequest{Session: r.Session, Path: p, Content: []byte(p), MakeParents: &yes}); err != nil {
			t.Fatal(err)
		}
	}
	dc.stopAll()

	last := make([]uint64, 3)
	for i, dir := range dc.dirs {
		ls, err := Export(dir, nil, ExportOptions{Dry: true})
		if err != nil {
			t.Fatal(err)
		}
		stuck := vr.EpochOf(ls.View)<<32 | 1<<32 - 1
		writeHardState(t, dir, stuck, stuck, ls.Commit)
		last[i] = ls.Last
	}

	// Started again, the cell cannot leave the view: no master, and
	// every replica says so. (Elections take a few view-change timeouts
	// of 300 ms; this waits ten times as long.)
	for i := range dc.servers {
		dc.start(i, nil, nil)
	}
	time.Sleep(3 * time.Second)
	for i, srv := range dc.servers {
		if srv.IsMaster() {
			t.Fatalf("replica %d became master from the last view of an epoch", i+1)
		}
		if why := srv.unhealthy(); !strings.Contains(why, "last view of epoch") || !strings.Contains(why, "chubbyd export") {
			t.Fatalf("replica %d's health says %q", i+1, why)
		}
	}
	if _, err := Export(dc.dirs[0], nil, ExportOptions{Dry: true}); !errors.Is(err, replica.ErrInUse) {
		t.Fatalf("export of a running replica's directory: %v, want ErrInUse", err)
	}
	dc.stopAll()

	// The operator's way out: look at every replica, export the most
	// complete log, restore every replica of a new cell from it.
	best, bestDir := (*Exported)(nil), ""
	for i, dir := range dc.dirs {
		ls, err := Export(dir, nil, ExportOptions{Dry: true})
		if err != nil {
			t.Fatal(err)
		}
		if !ls.LastOfEpoch || ls.ID != uint64(i+1) || ls.Last < last[i] {
			t.Fatalf("replica %d's log state %+v", i+1, ls.LogState)
		}
		if best == nil || ls.LastNormalView > best.LastNormalView || (ls.LastNormalView == best.LastNormalView && ls.Last > best.Last) {
			best, bestDir = ls, dir
		}
	}
	var file bytes.Buffer
	ex, err := Export(bestDir, &file, ExportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ex.Header == nil || ex.Index != best.Last || ex.Counts.Nodes < files {
		t.Fatalf("export: %+v", ex)
	}
	t.Logf("exported replica %d: index %d, %d commands applied (%d past the commit hint), %d nodes, %d bytes in %v",
		ex.ID, ex.Index, ex.Applied, ex.Uncommitted, ex.Counts.Nodes, file.Len(), ex.Took)

	nc := restoredCell(t, file.Bytes(), 3)
	nm := nc.master()
	ncli := newRawClient(t, nm.Addr())
	r2, err := ncli.CreateSession(ctx, &chubby.CreateSessionRequest{ClientName: "after"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range files {
		p := fmt.Sprintf("/data/f%d", i)
		h, err := ncli.Open(ctx, &chubby.OpenRequest{Session: r2.Session, Path: p, Mode: chubby.OpenMode_READ, Create: chubby.CreateMode_OPEN_EXISTING})
		if err != nil {
			t.Fatalf("%s after the restore: %v", p, err)
		}
		c, err := ncli.GetContentsAndStat(ctx, &chubby.HandleRequest{Handle: h.Handle})
		if err != nil || string(c.GetContent()) != p {
			t.Fatalf("%s after the restore: %q, %v", p, c.GetContent(), err)
		}
	}
	if _, err := ncli.CreateFile(ctx, &chubby.CreateFileRequest{Session: r2.Session, Path: "/data/new", Content: []byte("n")}); err != nil {
		t.Fatal(err)
	}
}

// TestExportRefuses: a directory that does not exist (not created), an
// empty one, and a running replica's are refused with typed errors.
func TestExportRefuses(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nothing")
	if _, err := Export(missing, nil, ExportOptions{Dry: true}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a missing directory: %v", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("export created %s", missing)
	}
	if _, err := Export(t.TempDir(), nil, ExportOptions{Dry: true}); !errors.Is(err, ErrExportEmpty) {
		t.Fatalf("an empty directory: %v", err)
	}
}
