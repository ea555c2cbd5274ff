package clustertest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client/callopt"

	"github.com/chubbygo/chubby/gen/chubby"
)

// TestBigSnapshotCatchUp: a backup that was down while the cell took in
// CHUBBY_BIG_SNAPSHOT_MIB MiB of file contents (and compacted its log)
// catches up by a snapshot of that size, shipped in chunks. It reports
// the catch-up time and the peak memory (VmHWM) of the backup and of the
// primary that sent it. Behind the variable: it writes that much.
func TestBigSnapshotCatchUp(t *testing.T) {
	mib, _ := strconv.Atoi(os.Getenv("CHUBBY_BIG_SNAPSHOT_MIB"))
	if mib <= 0 {
		t.Skip("set CHUBBY_BIG_SNAPSHOT_MIB=600 to ship a 600 MiB snapshot")
	}
	pc := startProcCellWith(t, 3, procOptions{HTTP: true, Args: []string{"--lease", "5m", "--snapshot-every", "200"}})
	c := newConn(t, pc.clients)
	sess := mustDo(t, c, func(ctx context.Context, o callopt.Option) (*chubby.CreateSessionResponse, error) {
		return c.cli.CreateSession(ctx, &chubby.CreateSessionRequest{ClientName: "big"}, o)
	}).Session
	pc.kill(2)

	files := mib * 4 // 256 KiB each
	content := bytes.Repeat([]byte("0123456789abcdef"), 256<<10/16)
	t0 := time.Now()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			yes := true
			for i := w; i < files && !t.Failed(); i += 8 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				_, err := do(ctx, c, func(ctx context.Context, o callopt.Option) (*chubby.Stat, error) {
					return c.cli.CreateFile(ctx, &chubby.CreateFileRequest{Session: sess, Path: fmt.Sprintf("/big/%d/f%05d", i%16, i),
						Content: content, MakeParents: &yes}, o)
				})
				cancel()
				var ce *chubby.ChubbyError
				if err != nil && !(errors.As(err, &ce) && ce.Code == chubby.ErrorCode_EXISTS) { // EXISTS: an attempt that timed out did it
					t.Errorf("create file %d: %v", i, err)
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("wrote %d MiB in %d files in %v", mib, files, time.Since(t0).Round(time.Millisecond))
	primary := -1
	var target float64
	for i := range 2 {
		if v, err := metric(pc.https[i], "chubby_is_master"); err == nil && v == 1 {
			primary = i
			target, _ = metric(pc.https[i], "chubby_applied_index")
		}
	}
	if primary < 0 {
		t.Fatal("no master among the replicas up")
	}
	// Let the last snapshot covering the writes be stored.
	time.Sleep(3 * time.Second)

	t1 := time.Now()
	pc.start(2)
	for {
		v, err := metric(pc.https[2], "chubby_applied_index")
		if err == nil && v >= target {
			break
		}
		if time.Since(t1) > 3*time.Minute {
			t.Fatalf("replica 3 did not catch up within 3 minutes (applied %v of %v)", v, target)
		}
		time.Sleep(50 * time.Millisecond)
	}
	catchUp := time.Since(t1)
	b, err := os.ReadFile(pc.logs[2])
	if err != nil {
		t.Fatal(err)
	}
	log3 := string(b)
	if !strings.Contains(log3, "snapshot received") {
		t.Fatalf("replica 3 caught up without a snapshot:\n%s", tail(log3, 3000))
	}
	t.Logf("replica 3 caught up (applied index %v) in %v by snapshot; peak memory: backup %d MiB, primary %d MiB",
		target, catchUp.Round(time.Millisecond), vmHWM(t, pc.pid(2))>>10, vmHWM(t, pc.pid(primary))>>10)
	for _, l := range strings.Split(log3, "\n") {
		if strings.Contains(l, "snapshot received") || strings.Contains(l, "installing a snapshot") || strings.Contains(l, "stalled") {
			t.Log(l)
		}
	}
}

// metric reads one gauge from a replica's /metrics.
func metric(addr, name string) (float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == name {
			return strconv.ParseFloat(f[1], 64)
		}
	}
	return 0, fmt.Errorf("no %s", name)
}

// vmHWM is a process's peak resident memory, KiB.
func vmHWM(t *testing.T, pid int) int { return procStatusKB(t, pid, "VmHWM") }

// procStatusKB reads a "Key:   N kB" line of /proc/PID/status (0 if absent).
func procStatusKB(t *testing.T, pid int, key string) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}
