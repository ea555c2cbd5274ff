package recipe

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Tests kill participants with SIGKILL, so participants are processes:
// this test binary re-executed with childEnv naming the child's main,
// registered in children by an init function of the test file that uses
// it. A child talks to the test through lines on its stdout.

const childEnv = "RECIPE_CHILD"

// children are the mains a child process can run, by name: each gets
// its arguments and returns the exit code.
var children = map[string]func(args []string) int{}

func TestMain(m *testing.M) {
	if name := os.Getenv(childEnv); name != "" {
		main, ok := children[name]
		if !ok {
			os.Stderr.WriteString("recipe test: no child named " + name + "\n")
			os.Exit(2)
		}
		var args []string
		if err := json.Unmarshal([]byte(os.Getenv(childEnv+"_ARGS")), &args); err != nil {
			os.Stderr.WriteString("recipe test: bad " + childEnv + "_ARGS: " + err.Error() + "\n")
			os.Exit(2)
		}
		os.Exit(main(args))
	}
	os.Exit(m.Run())
}

// child is a running child process.
type child struct {
	t     testing.TB
	cmd   *exec.Cmd
	lines chan string // its stdout, line by line; closed at its end
	done  chan struct{}
}

// startChild starts the child main name with args, talking to the cell
// at cellAddrs (CHUBBY_CELL). It is killed when the test ends.
func startChild(t testing.TB, name, cellAddrs string, args ...string) *child {
	t.Helper()
	js, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+name, childEnv+"_ARGS="+string(js), "CHUBBY_CELL="+cellAddrs)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{t: t, cmd: cmd, lines: make(chan string, 1024), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		cmd.Wait()
	}()
	t.Cleanup(c.Kill)
	return c
}

// Expect waits (bounded by within) for a line starting with prefix and
// returns it; lines before it are skipped. It fails the test if the child
// ends or the time runs out first.
func (c *child) Expect(prefix string, within time.Duration) string {
	c.t.Helper()
	timeout := time.After(within)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				c.t.Fatalf("child ended before printing %q", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			c.t.Fatalf("no %q from the child within %v", prefix, within)
		}
	}
}

// Kill sends SIGKILL to the child (if it still runs) and waits for it.
func (c *child) Kill() {
	c.cmd.Process.Kill()
	<-c.done
}

// Wait waits for the child to exit by itself (bounded) and returns its
// exit code.
func (c *child) Wait(within time.Duration) int {
	c.t.Helper()
	select {
	case <-c.done:
	case <-time.After(within):
		c.t.Fatalf("child still running after %v", within)
	}
	return c.cmd.ProcessState.ExitCode()
}
