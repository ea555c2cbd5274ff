package main

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell/celltest"
)

// line is one line a candidate process printed.
type line struct {
	who  int
	text string
}

// TestElectionKill9 runs three candidates as real processes and kills the
// leader with kill -9: its connection closes, so its session ends within
// one lease, and the next leads within lease + lock-delay (plus the grant
// and the write); the remaining follower prints the new leader from an
// event.
func TestElectionKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the example and starts processes (skipped with -short)")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := filepath.Join(t.TempDir(), "election")
	bctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(bctx, goTool, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cell := celltest.Start(t, celltest.Options{Lease: lease})

	lines := make(chan line, 100)
	procs := map[int]*exec.Cmd{}
	for who := 1; who <= 3; who++ {
		cmd := exec.Command(bin, "--cell", cell.Addr, "--path", "/election/leader",
			"--address", fmt.Sprintf("10.0.0.%d:5432", who), "--lock-delay", lockDelay.String())
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
		procs[who] = cmd
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- line{who, sc.Text()}
			}
		}()
	}
	// Who leads? The first "self won" line says. Then wait until both
	// others know it too, so that they follow by events from then on.
	leader := -1
	knows := map[int]string{} // candidate -> the last line it printed
	known := func() bool {
		if leader < 0 {
			return false
		}
		for who := range procs {
			if who != leader && !strings.HasPrefix(knows[who], fmt.Sprintf("leader 10.0.0.%d:5432 ", leader)) {
				return false
			}
		}
		return true
	}
	for timeout := time.After(20 * time.Second); !known(); {
		select {
		case l := <-lines:
			t.Logf("candidate %d: %s", l.who, l.text)
			knows[l.who] = l.text
			if strings.HasSuffix(l.text, " self won held") {
				leader = l.who
			}
		case <-timeout:
			t.Fatalf("no leader known to all within 20s: leader %d, last lines %v", leader, knows)
		}
	}
	var rest []int
	for who := range procs {
		if who != leader {
			rest = append(rest, who)
		}
	}
	if err := procs[leader].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// One of the rest wins; the other hears of it by event (the two
	// processes' lines may come in either order).
	newLeader, follower := -1, -1
	var takeover, heard time.Duration
	after := map[int][]string{} // lines printed since the kill
	for timeout := time.After(takeoverBound + 10*time.Second); newLeader < 0 || heard == 0; {
		select {
		case l := <-lines:
			t.Logf("candidate %d: %s", l.who, l.text)
			after[l.who] = append(after[l.who], l.text)
			if l.who != leader && strings.HasSuffix(l.text, " self won held") {
				newLeader, takeover = l.who, time.Since(killed)
				follower = rest[0]
				if follower == newLeader {
					follower = rest[1]
				}
			}
			if newLeader > 0 && heard == 0 && slices.Contains(after[follower], fmt.Sprintf("leader 10.0.0.%d:5432 event held", newLeader)) {
				heard = time.Since(killed)
			}
		case <-timeout:
			t.Fatalf("after kill -9 of %d: new leader %d, lines %v", leader, newLeader, after)
		}
	}
	t.Logf("kill -9 of leader %d: candidate %d took over in %v (lease %v + lock-delay %v); follower %d heard by event after %v",
		leader, newLeader, takeover.Round(time.Millisecond), lease, lockDelay, follower, heard.Round(time.Millisecond))
	if limit := lease + lockDelay + 2*time.Second; takeover > limit {
		t.Errorf("takeover after kill -9 took %v, more than lease + lock-delay + 2s = %v", takeover, limit)
	}
}
