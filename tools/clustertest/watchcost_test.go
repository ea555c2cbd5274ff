package clustertest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	kclient "github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/client/callopt"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/chubby/combineservice"
)

// TestMasterWatchCost measures what clients' master watches cost the cell:
// N GetMaster calls with wait_ms held at one backup of a 3-replica cell of
// real processes (what N clients with sessions keep), against the same
// window with none. It reports the backup's and the master's CPU (cores)
// and the backup's resident memory, and scales them to 10,000 watches. A
// measurement, not a check: it runs only with CHUBBY_WATCH_COST=N (N the
// watches; each needs a connection, so mind ulimit -n):
//
//	CHUBBY_WATCH_COST=2000 go test ./tools/clustertest -run TestMasterWatchCost -v
func TestMasterWatchCost(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("CHUBBY_WATCH_COST"))
	if n <= 0 {
		t.Skip("a measurement: set CHUBBY_WATCH_COST to the number of watches")
	}
	const window = 20 * time.Second
	pc := startProcCell(t, 3)
	m, backup := -1, -1
	for deadline := time.Now().Add(30 * time.Second); m < 0 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r, err := pc.getMaster(ctx, 0)
		cancel()
		if err == nil {
			for i, a := range pc.clients {
				if a == r.MasterAddress {
					m = i
				}
			}
		}
	}
	if m < 0 {
		t.Fatal("no master within 30 s")
	}
	backup = (m + 1) % 3
	time.Sleep(2 * time.Second) // settle
	cpu := func(i int) float64 { return procCPU(t, pc.pid(i)) }
	measure := func() (bCPU, mCPU float64, rss int) {
		b0, m0 := cpu(backup), cpu(m)
		time.Sleep(window)
		return (cpu(backup) - b0) / window.Seconds(), (cpu(m) - m0) / window.Seconds(), vmRSS(t, pc.pid(backup))
	}
	bIdle, mIdle, rssIdle := measure()

	kc, err := combineservice.NewClient("chubby", kclient.WithHostPorts(pc.clients[backup]),
		kclient.WithConnectTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cur := pc.clients[m]
	hold := int64(chubby.MAX_GET_MASTER_WAIT_MS)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed int
	var firstErr error
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				_, err := kc.GetMaster(ctx, &chubby.GetMasterRequest{Unreachable: &cur, WaitMs: &hold},
					callopt.WithRPCTimeout(time.Duration(hold)*time.Millisecond+5*time.Second))
				if err != nil && ctx.Err() == nil {
					mu.Lock()
					failed++
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					time.Sleep(time.Second)
				}
			}
		}()
	}
	time.Sleep(5 * time.Second) // every watch parked
	bWatch, mWatch, rssWatch := measure()
	cancel()
	wg.Wait()
	if firstErr != nil {
		t.Logf("%d watch calls failed (first: %v)", failed, firstErr)
	}
	per := 10000 / float64(n)
	t.Logf("%d watches held at a backup for %v: backup CPU %.4f → %.4f cores (+%.4f; ×%.1f for 10,000: +%.3f), master %.4f → %.4f, backup RSS %d → %d KiB (+%.1f KiB per watch; 10,000: +%.0f MiB)",
		n, window, bIdle, bWatch, bWatch-bIdle, per, (bWatch-bIdle)*per, mIdle, mWatch, rssIdle, rssWatch,
		float64(rssWatch-rssIdle)/float64(n), float64(rssWatch-rssIdle)*per/1024)
}

// procCPU is the process's utime+stime in seconds.
func procCPU(t *testing.T, pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// vmRSS is the process's resident set in KiB.
func vmRSS(t *testing.T, pid int) int { return procStatusKB(t, pid, "VmRSS") }
