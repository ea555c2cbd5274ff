package cell_test

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell"
	"github.com/chubbygo/chubby/cell/celltest"
)

// metric reads one unlabelled counter or gauge from a replica's /metrics.
func metric(t *testing.T, httpAddr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return f
		}
	}
	t.Fatalf("no %s in %s's /metrics", name, httpAddr)
	return 0
}

// TestStoppedMasterFoundDead: when the master's process goes (here: its
// servers stop, so its peer port refuses), the others do not wait out the
// view-change timeout in silence: a dial of its peer port is refused, the
// view change starts at once (chubby_master_found_dead_total), and a new
// master serves well before the timeout. The view-change timeout is made
// long (10 s) so that only the evidence can explain a quick failover.
func TestStoppedMasterFoundDead(t *testing.T) {
	const timeout = 10 * time.Second
	rc := celltest.StartStaticWith(t, 3, func(c *cell.Config) {
		c.HTTPListen = "127.0.0.1:0"
		c.Replication.ViewChangeTimeout = timeout
	})
	m := rc.Master()
	start := time.Now()
	rc.Stop(m)
	next := rc.Master(m)
	took := time.Since(start)
	t.Logf("replica %d master %v after replica %d stopped", next+1, took, m+1)
	if took >= timeout {
		t.Fatalf("a new master after %v: the stopped master was waited out as silence", took)
	}
	var gone float64
	for i := range 3 {
		if i != m {
			gone += metric(t, rc.Server(i).HTTPAddr(), "chubby_master_found_dead_total")
			if v := metric(t, rc.Server(i).HTTPAddr(), "chubby_view_changes_total"); v < 1 {
				t.Errorf("replica %d counts %v view changes", i+1, v)
			}
		}
	}
	if gone < 1 {
		t.Fatalf("no replica found the stopped master dead (chubby_master_found_dead_total)")
	}
}
