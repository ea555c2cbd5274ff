package cell

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
)

// TestLoopPauseMillionNodes measures the replica loop's longest pause
// while snapshots of a state of a million nodes are taken: the snapshot
// is encoded off the loop (from the shadow), so the longest input stays
// far below the encoding's own time, which is measured beside it.
// Behind CHUBBY_BIG_STATE=1 (it creates a million nodes: a few minutes).
func TestLoopPauseMillionNodes(t *testing.T) {
	if os.Getenv("CHUBBY_BIG_STATE") == "" {
		t.Skip("set CHUBBY_BIG_STATE=1 to create a million nodes and measure the loop's pauses")
	}
	tc := startCell(t, Config{SnapshotEvery: 200_000, Lease: 10 * time.Minute})
	ctx := context.Background()
	s := tc.session("big")
	const dirs, perDir = 100, 9_990 // 999,000 files, 100 directories, the root
	var made atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			yes := true
			for i := w; i < dirs*perDir; i += 32 {
				p := fmt.Sprintf("/d%03d/f%05d", i%dirs, i/dirs)
				_, err := tc.cli.CreateFile(ctx, &chubby.CreateFileRequest{Session: s, Path: p, Content: []byte("x"), MakeParents: &yes})
				if err != nil {
					t.Error(err)
					return
				}
				if n := made.Add(1); n%100_000 == 0 {
					t.Logf("%d files in %v", n, time.Since(start).Round(time.Second))
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	var encode time.Duration
	tc.s.m.read(func(st *fs.State) {
		t0 := time.Now()
		b := st.Snapshot()
		encode = time.Since(t0)
		t.Logf("state: %d files, snapshot %d MB; encoded on the loop it would stop the loop for %v", made.Load(), len(b)>>20, encode.Round(time.Millisecond))
	})
	// Writes on, through two more snapshots of the full state (a fresh
	// session: the first one's lease may run out meanwhile).
	tc.s.metrics.maxPause.Store(0)
	ws := tc.session("writer")
	t1 := time.Now()
	first := tc.s.log.Info().SnapshotIndex
	var snaps atomic.Int64
	stop := make(chan struct{})
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := tc.open(ws, fmt.Sprintf("/d%03d/f%05d", w, 0), chubby.CreateMode_OPEN_EXISTING, false)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := tc.cli.SetContents(ctx, &chubby.SetContentsRequest{Handle: h, Content: []byte(fmt.Sprint(i))}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for last := first; snaps.Load() < 2 && !t.Failed(); time.Sleep(10 * time.Millisecond) {
		if idx := tc.s.log.Info().SnapshotIndex; idx != last {
			last = idx
			snaps.Add(1)
			t.Logf("snapshot at %d after %v", idx, time.Since(t1).Round(time.Second))
		}
		if time.Since(t1) > 15*time.Minute {
			t.Error("no two snapshots within 15 minutes")
		}
	}
	close(stop)
	wg.Wait()
	longest := time.Duration(tc.s.metrics.maxPause.Load())
	t.Logf("%d snapshots of the full state in %v of writes; the loop's longest input meanwhile: %v", snaps.Load(), time.Since(t1).Round(time.Second), longest)
	if longest > 50*time.Millisecond {
		t.Errorf("the loop paused for %v (goal: under 50 ms)", longest)
	}
}
