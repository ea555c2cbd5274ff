package cell

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chubbygo/chubby/gen/chubby"
)

// TestBackupHundredThousandNodes measures a backup and a restore of a
// cell of 100,000 files while 16 writers keep the cell busy: the save's
// time and size, the replica loop's longest input during it (the snapshot
// is captured between two commands and encoded and stored off the loop,
// so it stays far below the encoding's time), and the restore's time and
// the restored cell's start, and an export of the stopped replica's
// directory (chubbyd export). Behind CHUBBY_BACKUP_BIG=1 (it creates
// 100,000 files: a minute or so).
func TestBackupHundredThousandNodes(t *testing.T) {
	if os.Getenv("CHUBBY_BACKUP_BIG") == "" {
		t.Skip("set CHUBBY_BACKUP_BIG=1 to create 100,000 files and measure a backup and a restore")
	}
	tc := startCell(t, Config{Lease: 10 * time.Minute})
	s := tc.session("big")
	const dirs, perDir = 100, 1_000
	var wg sync.WaitGroup
	start := time.Now()
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			yes := true
			for i := w; i < dirs*perDir; i += 32 {
				p := fmt.Sprintf("/d%03d/f%05d", i%dirs, i/dirs)
				_, err := tc.cli.CreateFile(ctx, &chubby.CreateFileRequest{Session: s, Path: p, Content: []byte("content of " + p), MakeParents: &yes})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("%d files made in %v", dirs*perDir, time.Since(start).Round(time.Second))
	var encode time.Duration
	{
		t0 := time.Now()
		b := stateBytes(tc.s.m)
		encode = time.Since(t0)
		t.Logf("the state encodes to %d bytes in %v (what a backup would stop the loop for if it encoded there)", len(b), encode.Round(time.Millisecond))
	}

	stop := make(chan struct{})
	var writes atomic.Int64
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := tc.open(s, fmt.Sprintf("/d%03d/f%05d", w, 0), chubby.CreateMode_OPEN_EXISTING, false)
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
				writes.Add(1)
			}
		}()
	}
	time.Sleep(time.Second) // the writers under way
	tc.s.metrics.maxPause.Store(0)
	w0 := writes.Load()
	t0 := time.Now()
	file := saveBackup(t, tc.cli)
	save := time.Since(t0)
	longest := time.Duration(tc.s.metrics.maxPause.Load())
	w1 := writes.Load()
	close(stop)
	wg.Wait()
	t.Logf("backup: %d bytes (%.1f MB) saved in %v under load (%d writes meanwhile, %.0f/s); the loop's longest input meanwhile: %v",
		len(file), float64(len(file))/1e6, save.Round(time.Millisecond), w1-w0, float64(w1-w0)/save.Seconds(), longest)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "restored")
	t1 := time.Now()
	if _, err := Restore(bytes.NewReader(file), RestoreOptions{DataDir: dir, ID: 1, Listen: ln.Addr().String(), Logger: quietLogger()}); err != nil {
		t.Fatal(err)
	}
	restore := time.Since(t1)
	t2 := time.Now()
	rc := startOn(t, Config{DataDir: dir, Lease: 10 * time.Minute}, ln)
	for !rc.s.IsMaster() {
		time.Sleep(time.Millisecond)
	}
	t.Logf("restore: %v to check and write the directory; the restored cell serves %v after its start began", restore.Round(time.Millisecond), time.Since(t2).Round(time.Millisecond))

	// The same cell exported from its stopped replica's directory
	// (chubbyd export): the snapshot plus the log replayed.
	tc.stop()
	var ex bytes.Buffer
	e, err := Export(tc.dir, &ex, ExportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("export of the stopped replica: %d bytes (%.1f MB) in %v: the snapshot at %d plus %d commands replayed, %d nodes",
		ex.Len(), float64(ex.Len())/1e6, e.Took.Round(time.Millisecond), e.SnapshotIndex, e.Applied, e.Counts.Nodes)
}
