package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// holdScript runs until the file stop exists, after touching held.
func holdScript(held, stop string) string {
	return `touch ` + held + `; while [ ! -e ` + stop + ` ]; do sleep 0.02; done`
}

func background(t *testing.T, addr string, args ...string) chan result {
	t.Helper()
	done := make(chan result, 1)
	go func() { done <- at(t, addr, "", args...) }()
	return done
}

func finished(t *testing.T, done chan result) result {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("command did not end")
	}
	panic("unreachable")
}

// squeeze collapses the runs of blanks in r's output lines (table columns
// are as wide as their widest cell).
func squeeze(r result) result {
	var lines []string
	for _, l := range strings.Split(r.stdout, "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	r.stdout = strings.Join(lines, "\n")
	return r
}

func touch(t *testing.T, name string) {
	t.Helper()
	if err := os.WriteFile(name, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestLockShow: lock show prints mode, holders, generation, waiters and
// lock-delay of a file, and of a directory's nodes; lock PATH -- COMMAND
// still works beside the sub-command.
func TestLockShow(t *testing.T) {
	addr := startCell(t)
	dir := t.TempDir()
	want(t, at(t, addr, "", "mkdir", "/locks"), exitOK, "", "")
	want(t, at(t, addr, "", "touch", "/locks/a"), exitOK, "", "")
	want(t, squeeze(at(t, addr, "", "lock", "show", "/locks/a")), exitOK, "/locks/a free 0 0 0 -", "")

	held, stop := filepath.Join(dir, "held"), filepath.Join(dir, "stop")
	bg := background(t, addr, "lock", "--lock-delay", "0", "/locks/a", "--", "sh", "-c", holdScript(held, stop))
	waitFile(t, held)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waiter := make(chan int, 1)
	go func() {
		waiter <- run(ctx, []string{"--cell", addr, "lock", "--shared", "/locks/a", "--", "true"},
			strings.NewReader(""), &syncBuffer{}, &syncBuffer{}, func(string) string { return "" })
	}()
	// Until the waiter queues.
	var r result
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r = at(t, addr, "", "lock", "show", "--json", "/locks")
		if strings.Contains(r.stdout, `"waiters":1`) || time.Now().After(deadline) {
			break
		}
	}
	want(t, r, exitOK, `{"path":"/locks","mode":"free","holders":0,"lock_generation":0,"waiters":0,"delay_remaining_ms":0}`, "")
	var l lockState
	if err := json.Unmarshal([]byte(strings.Split(strings.TrimSpace(r.stdout), "\n")[1]), &l); err != nil {
		t.Fatal(err)
	}
	if l != (lockState{Path: "/locks/a", Mode: "exclusive", Holders: 1, LockGeneration: 1, Waiters: 1}) {
		t.Fatalf("lock show --json /locks: %+v", l)
	}
	want(t, squeeze(at(t, addr, "", "lock", "show", "/locks/a")), exitOK, "/locks/a exclusive 1 1 1 -", "")

	touch(t, stop)
	want(t, finished(t, bg), exitOK, "", "")
	select {
	case code := <-waiter:
		if code != exitOK {
			t.Fatalf("shared waiter exited %d", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("shared waiter did not get the lock")
	}
	want(t, squeeze(at(t, addr, "", "lock", "show", "/locks/a")), exitOK, "/locks/a free 0 2 0 -", "")

	want(t, at(t, addr, "", "lock", "show", "/locks/none"), exitRefused, "", "lock show /locks/none: not found")
	want(t, at(t, addr, "", "lock", "show"), exitUsage, "", "")
	want(t, at(t, addr, "", "lock", "show", "rel"), exitUsage, "", "")
}

// TestElectionCampaign: one campaign leads and show names its address; a
// second waits, and follow prints it when the first steps down; show says
// nobody leads once both ended.
func TestElectionCampaign(t *testing.T) {
	addr := startCell(t)
	dir := t.TempDir()
	want(t, at(t, addr, "", "mkdir", "/election"), exitOK, "", "")

	held1, stop1 := filepath.Join(dir, "held1"), filepath.Join(dir, "stop1")
	first := background(t, addr, "election", "campaign", "--address", "10.0.0.1:80", "--lock-delay", "0",
		"/election/db", "--", "sh", "-c", holdScript(held1, stop1))
	waitFile(t, held1)
	want(t, at(t, addr, "", "election", "show", "/election/db"), exitOK, "leader: 10.0.0.1:80 (lock generation 1, 0 waiting)", "")
	r := at(t, addr, "", "election", "show", "--json", "/election/db")
	want(t, r, exitOK, `"leader":"10.0.0.1:80"`, "")
	want(t, at(t, addr, "", "election", "campaign", "--timeout", "300ms", "/election/db", "--", "true"),
		exitRefused, "", "not elected within 300ms")

	// A follower, and a second candidate waiting.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, errb, followed := &syncBuffer{}, &syncBuffer{}, make(chan int, 1)
	go func() {
		followed <- run(ctx, []string{"--cell", addr, "election", "follow", "--count", "2", "/election/db"},
			strings.NewReader(""), out, errb, func(string) string { return "" })
	}()
	held2, stop2 := filepath.Join(dir, "held2"), filepath.Join(dir, "stop2")
	second := background(t, addr, "election", "campaign", "--address", "10.0.0.2:80", "--lock-delay", "0",
		"/election/db", "--", "sh", "-c", holdScript(held2, stop2))
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), "10.0.0.1:80"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("follow did not print the first leader: %q %q", out.String(), errb.String())
		}
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(at(t, addr, "", "election", "show", "/election/db").stdout, "1 waiting"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second candidate does not wait")
		}
	}

	touch(t, stop1) // the first steps down
	want(t, finished(t, first), exitOK, "", "chubbyfs: leading /election/db as 10.0.0.1:80")
	waitFile(t, held2)
	select {
	case code := <-followed:
		if code != exitOK {
			t.Fatalf("follow exited %d: %s", code, errb.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("follow did not see the second leader")
	}
	if got := out.String(); got != "leader 10.0.0.1:80 generation=1\nleader 10.0.0.2:80 generation=2\n" {
		t.Fatalf("follow printed %q", got)
	}
	want(t, at(t, addr, "", "election", "show", "/election/db"), exitOK, "leader: 10.0.0.2:80 (lock generation 2", "")
	var now leaderState
	jsonOf(t, addr, "", exitOK, &now, "election", "follow", "--json", "--count", "1", "/election/db")
	if now.Path != "/election/db" || now.Leader != "10.0.0.2:80" || now.LockGeneration != 2 {
		t.Errorf("election follow --json = %+v", now)
	}

	touch(t, stop2)
	want(t, finished(t, second), exitOK, "", "")
	want(t, at(t, addr, "", "election", "show", "/election/db"), exitRefused, "leader: none (the lock is free, 0 waiting)", "")

	// Usage errors.
	for _, args := range [][]string{
		{"election"},
		{"election", "show"},
		{"election", "show", "rel"},
		{"election", "campaign", "/election/db"},
		{"election", "campaign", "/election/db", "--"},
		{"election", "campaign", "--lock-delay", "2m", "/election/db", "--", "true"},
		{"election", "follow", "--count", "-1", "/election/db"},
	} {
		want(t, at(t, addr, "", args...), exitUsage, "", "")
	}
}

// TestLockShowDelay: after a holder's session dies holding the lock,
// lock show says how much lock-delay is left, and the lock is free.
func TestLockShowDelay(t *testing.T) {
	cell := startCellLease(t, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Connect(ctx, client.Config{Addrs: []string{cell.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.Open(ctx, "/d", client.OpenOptions{Create: chubby.CreateMode_OPEN_OR_CREATE})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.TryAcquire(ctx, chubby.LockMode_EXCLUSIVE, client.LockOptions{LockDelay: 20 * time.Second}); err != nil {
		t.Fatal(err)
	}
	c.Close() // dies holding the lock
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r := squeeze(at(t, cell.Addr, "", "lock", "show", "/d"))
		if strings.Contains(r.stdout, "/d free 0 1 0 ") {
			if strings.HasSuffix(strings.TrimSpace(r.stdout), " -") {
				t.Fatalf("no lock-delay shown: %q", r.stdout)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dead holder's lock is not free in lock-delay: %q", r.stdout)
		}
	}
	r := at(t, cell.Addr, "", "lock", "show", "--json", "/d")
	var l lockState
	if err := json.Unmarshal([]byte(r.stdout), &l); err != nil || l.DelayRemainingMs <= 0 || l.DelayRemainingMs > 20000 {
		t.Fatalf("lock show --json: %q (%v)", r.stdout, err)
	}
	want(t, at(t, cell.Addr, "", "election", "show", "/d"), exitRefused, "in lock-delay for", "")
}
