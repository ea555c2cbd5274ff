package main

import (
	"bufio"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeBanner: serve says on stdout what the replica is and where it
// listens, as dev does (it printed nothing but logs).
func TestServeBanner(t *testing.T) {
	if testing.Short() {
		t.Skip("starts chubbyd")
	}
	bin := buildChubbyd(t)
	addr := freePort(t)
	cmd := exec.Command(bin, "serve", "--listen", addr, "--http", "", "--data", t.TempDir(), "--log-level", "warn")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var got []string
	timeout := time.After(60 * time.Second)
	for len(got) < 6 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("chubbyd serve ended its output after %q", got)
			}
			got = append(got, l)
		case <-timeout:
			t.Fatalf("no banner within 60 s; got %q", got)
		}
	}
	banner := strings.Join(got, "\n")
	for _, want := range []string{`chubbyd: replica 1 of cell "local" starting`, "clients:  " + addr, "status:   off", "security: PLAINTEXT"} {
		if !strings.Contains(banner, want) {
			t.Errorf("banner lacks %q:\n%s", want, banner)
		}
	}
}
