package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLockedCommandToldWhenFileDeleted: the file of a lock held by lock
// or election campaign is deleted (rm -r of its directory) while the
// session stays safe. The lock is gone with the node: COMMAND gets
// --lost-signal (recorded by its trap), the loss is reported, the exit
// status is 1 although COMMAND exits 0, and nothing is released. A COMMAND
// that ignores the signal is killed once --lost-grace has passed.
func TestLockedCommandToldWhenFileDeleted(t *testing.T) {
	addr := startCell(t)
	for _, tc := range []struct {
		name string
		argv func(path string) []string
		sig  string // the signal the trap records, as sh names it
		grep string // in stderr
	}{
		{"lock, default signal", func(p string) []string { return []string{"lock", p, "--"} }, "TERM", "lock lost: the file was deleted"},
		{"lock, --lost-signal USR1", func(p string) []string { return []string{"lock", "--lost-signal", "usr1", p, "--"} }, "USR1", "sent it SIGUSR1"},
		{"election campaign", func(p string) []string {
			return []string{"election", "campaign", "--address", "me:1", "--lost-signal", "SIGHUP", p, "--"}
		}, "HUP", "lock lost: the file was deleted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			held, rec := filepath.Join(dir, "held"), filepath.Join(dir, "signal")
			d := "/" + strings.NewReplacer(" ", "", ",", "", "-", "").Replace(tc.name)
			want(t, at(t, addr, "", "mkdir", d), exitOK, "", "")
			script := `trap 'echo ` + tc.sig + ` > ` + rec + `; exit 0' ` + tc.sig + `; touch ` + held + `; while true; do sleep 0.02; done`
			done := make(chan result, 1)
			go func() { done <- at(t, addr, "", append(tc.argv(d+"/f"), "sh", "-c", script)...) }()
			waitFile(t, held)
			want(t, at(t, addr, "", "rm", "-r", d), exitOK, "", "")
			select {
			case r := <-done:
				want(t, r, exitRefused, "", tc.grep)
				if strings.Contains(r.stderr, "release") {
					t.Errorf("a lost lock was released: stderr %q", r.stderr)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("COMMAND still runs 30 s after its lock's file was deleted")
			}
			b, err := os.ReadFile(rec)
			if err != nil || strings.TrimSpace(string(b)) != tc.sig {
				t.Fatalf("COMMAND recorded signal %q (%v), want %s", b, err, tc.sig)
			}
		})
	}

	t.Run("grace, then SIGKILL", func(t *testing.T) {
		held := filepath.Join(t.TempDir(), "held")
		want(t, at(t, addr, "", "mkdir", "/stubborn"), exitOK, "", "")
		done := make(chan result, 1)
		go func() {
			done <- at(t, addr, "", "lock", "--lost-grace", "200ms", "/stubborn/f", "--", "sh", "-c",
				`trap '' TERM; touch `+held+`; while true; do sleep 0.02; done`)
		}()
		waitFile(t, held)
		want(t, at(t, addr, "", "rm", "-r", "/stubborn"), exitOK, "", "")
		select {
		case r := <-done:
			want(t, r, exitRefused, "", "lock lost")
		case <-time.After(30 * time.Second):
			t.Fatal("a COMMAND that ignores SIGTERM was not killed after --lost-grace")
		}
	})
}
