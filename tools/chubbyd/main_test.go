package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/pkg/klog"

	"github.com/chubbygo/chubby/cell"
	"github.com/chubbygo/chubby/cell/version"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/chubby/combineservice"
)

func TestMain(m *testing.M) {
	klog.SetLevel(klog.LevelError) // the kill test makes Kitex retry dials loudly
	os.Exit(m.Run())
}

// buildChubbyd builds this command once per test binary run.
func buildChubbyd(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "chubbyd")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startDaemon starts chubbyd serve and waits (bounded) until it answers.
func startDaemon(t *testing.T, bin, addr, data string) (*exec.Cmd, combineservice.Client) {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--listen", addr, "--data", data, "--log-level", "warn")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	cli, err := combineservice.NewClient("chubby", client.WithHostPorts(addr),
		client.WithRPCTimeout(5*time.Second), client.WithConnectTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if _, err := cli.GetMaster(context.Background(), nil); err == nil {
			return cmd, cli
		}
		if i == 300 {
			t.Fatalf("chubbyd never answered on %s; its output:\n%s", addr, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestKill9KeepsAcknowledgedWrites: writers create files with random
// contents; chubbyd is killed with SIGKILL while writes are in flight; after
// a restart on the same data every acknowledged write is there, byte for
// byte.
func TestKill9KeepsAcknowledgedWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	bin := buildChubbyd(t)
	data := t.TempDir()
	addr := freePort(t)
	ctx := context.Background()

	for round := 0; round < 2; round++ {
		cmd, cli := startDaemon(t, bin, addr, data)
		sess, err := cli.CreateSession(ctx, &chubby.CreateSessionRequest{ClientName: "writer"})
		if err != nil {
			t.Fatal(err)
		}
		var (
			mu    sync.Mutex
			acked = map[string][]byte{}
			wg    sync.WaitGroup
			stop  = make(chan struct{})
		)
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(round), uint64(w)))
				for i := 0; i < 10000; i++ {
					select {
					case <-stop:
						return
					default:
					}
					content := make([]byte, rng.IntN(8192))
					for j := range content {
						content[j] = byte(rng.Uint32())
					}
					path := fmt.Sprintf("/r%d-w%d-%d", round, w, i)
					_, err := cli.CreateFile(ctx, &chubby.CreateFileRequest{Session: sess.Session, Path: path, Content: content})
					if err != nil {
						return // the server died under us: this write was not acknowledged
					}
					mu.Lock()
					acked[path] = content
					mu.Unlock()
				}
			}()
		}
		// Let some writes through, then kill -9 with writes in flight.
		for deadline := time.Now().Add(20 * time.Second); ; {
			mu.Lock()
			n := len(acked)
			mu.Unlock()
			if n >= 300 || time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
		close(stop)
		wg.Wait()
		mu.Lock()
		if len(acked) < 300 {
			t.Fatalf("only %d writes acknowledged before the kill", len(acked))
		}
		mu.Unlock()

		restarted, cli := startDaemon(t, bin, addr, data)
		reader, err := cli.CreateSession(ctx, &chubby.CreateSessionRequest{ClientName: "reader"})
		if err != nil {
			t.Fatal(err)
		}
		for path, want := range acked {
			o, err := cli.Open(ctx, &chubby.OpenRequest{Session: reader.Session, Path: path, Mode: chubby.OpenMode_READ, Create: chubby.CreateMode_OPEN_EXISTING})
			if err != nil {
				t.Fatalf("acknowledged write %s lost after kill -9: %v", path, err)
			}
			r, err := cli.GetContentsAndStat(ctx, &chubby.HandleRequest{Handle: o.Handle})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(r.Content, want) {
				t.Fatalf("%s: %d bytes after restart, want %d bytes as acknowledged", path, len(r.Content), len(want))
			}
			if err := cli.Close(ctx, &chubby.CloseRequest{Handle: o.Handle}); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("round %d: %d acknowledged writes all present after kill -9", round, len(acked))
		// Stop this incarnation with SIGKILL too; the next round restarts on
		// the same data with the previous rounds' files in it.
		restarted.Process.Signal(syscall.SIGKILL)
		restarted.Wait()
	}
}

func TestUsageErrors(t *testing.T) {
	var out, errb bytes.Buffer
	for _, args := range [][]string{{"serve"}, {"dev", "--no-such-flag"}, {"frobnicate"}, {"dev", "extra"}} {
		out.Reset()
		errb.Reset()
		if code := run(args, &out, &errb); code != 2 {
			t.Errorf("chubbyd %v: exit %d, want 2 (stderr %q)", args, code, errb.String())
		}
	}
	if code := run([]string{"--help"}, &out, &errb); code != 0 {
		t.Errorf("--help exit %d", code)
	}
}

// TestVersionFlag: chubbyd --version (and -v) prints one line, the one
// version.Info.Line makes, with the release number the cell reports.
func TestVersionFlag(t *testing.T) {
	wantLine := version.Read().Line("chubbyd") + "\n"
	if !strings.HasPrefix(wantLine, "chubbyd v"+cell.Version+" (commit ") || !strings.HasSuffix(wantLine, ") "+runtime.Version()+"\n") {
		t.Fatalf("version line %q lacks the cell's version %s or %s", wantLine, cell.Version, runtime.Version())
	}
	for _, flag := range []string{"--version", "-v"} {
		var out, errb bytes.Buffer
		if code := run([]string{flag}, &out, &errb); code != 0 || out.String() != wantLine || errb.Len() != 0 {
			t.Errorf("chubbyd %s: exit %d, stdout %q, stderr %q; want %q", flag, code, out.String(), errb.String(), wantLine)
		}
	}
}

// TestCompletion: chubbyd completion bash prints a completion script.
func TestCompletion(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"completion", "bash"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "__start_chubbyd") {
		t.Errorf("chubbyd completion bash: exit %d, %d bytes, stderr %q", code, out.Len(), errb.String())
	}
}

// The connection flags reach cell.Config; a bad --connection-limits is a
// usage error.
func TestConnConfig(t *testing.T) {
	o := &options{maxConns: 100, maxConnsPerIP: 10, connLimits: "10.0.0.9=8000, 127.0.0.1=64",
		firstCallTimeout: 3 * time.Second, connIdleTimeout: time.Minute}
	c, err := connConfig(o)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxConnections != 100 || c.MaxConnectionsPerIP != 10 || len(c.ConnectionLimits) != 2 ||
		c.ConnectionLimits[0].String() != "10.0.0.9/32=8000" || c.ConnectionLimits[1].String() != "127.0.0.1/32=64" ||
		c.FirstCallTimeout != 3*time.Second || c.ConnIdleTimeout != time.Minute {
		t.Fatalf("connConfig = %+v", c)
	}
	if got := withConns(cell.Config{Cell: "x"}, c); got.Cell != "x" || got.MaxConnectionsPerIP != 10 || len(got.ConnectionLimits) != 2 {
		t.Fatalf("withConns = %+v", got)
	}
	for _, bad := range []string{"10.0.0.0/8", "10.0.0.0/8=-", "host=3"} {
		if _, err := connConfig(&options{connLimits: bad}); err == nil {
			t.Errorf("--connection-limits %q accepted", bad)
		}
	}
}
