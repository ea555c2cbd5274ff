package recipe

import (
	"fmt"
	"os"
	"testing"
	"time"
)

func init() {
	children["echo"] = func(args []string) int {
		fmt.Println("ready", os.Getenv("CHUBBY_CELL"), args)
		if len(args) > 0 && args[0] == "hang" {
			select {}
		}
		return 3
	}
}

// TestChildProcesses checks the harness itself: a child's lines arrive,
// its exit code is seen, and Kill stops one that hangs.
func TestChildProcesses(t *testing.T) {
	c := startChild(t, "echo", "127.0.0.1:1", "a", "b")
	if l := c.Expect("ready", 10*time.Second); l != "ready 127.0.0.1:1 [a b]" {
		t.Errorf("child said %q", l)
	}
	if code := c.Wait(10 * time.Second); code != 3 {
		t.Errorf("exit code %d, want 3", code)
	}
	h := startChild(t, "echo", "x", "hang")
	h.Expect("ready", 10*time.Second)
	h.Kill()
	if code := h.cmd.ProcessState.ExitCode(); code != -1 {
		t.Errorf("killed child's exit code %d, want -1 (signal)", code)
	}
}
