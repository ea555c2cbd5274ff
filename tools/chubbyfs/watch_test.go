package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell/celltest"
)

// watching runs chubbyfs with args in the background until ctx ends or it
// exits, and waits until it says it is watching.
func watching(t *testing.T, ctx context.Context, args ...string) (out, errb *syncBuffer, done chan int) {
	t.Helper()
	out, errb, done = &syncBuffer{}, &syncBuffer{}, make(chan int, 1)
	go func() {
		done <- run(ctx, args, strings.NewReader(""), out, errb, func(string) string { return "" })
	}()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(errb.String(), "watching"); time.Sleep(5 * time.Millisecond) {
		select {
		case code := <-done:
			t.Fatalf("watch exited %d: %s", code, errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("watch did not start: %s", errb.String())
		}
	}
	return out, errb, done
}

func exited(t *testing.T, done chan int) int {
	t.Helper()
	select {
	case code := <-done:
		return code
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not exit")
	}
	panic("unreachable")
}

// TestWatch: watch prints the events asked for as they happen, one line
// each, ends after handle-invalid, after --count events, or on Ctrl-C
// (its context), and prints JSON lines with --json.
func TestWatch(t *testing.T) {
	addr := startCell(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	want(t, at(t, addr, "", "mkdir", "/w"), exitOK, "", "")
	want(t, at(t, addr, "a", "write", "/w/f"), exitOK, "", "")

	// Text, until the file is deleted.
	out, _, done := watching(t, ctx, "--cell", addr, "watch", "--events", "contents,invalid", "/w/f")
	want(t, at(t, addr, "b", "write", "/w/f"), exitOK, "", "")
	want(t, at(t, addr, "c", "write", "/w/f"), exitOK, "", "")
	want(t, at(t, addr, "", "rm", "/w/f"), exitOK, "", "")
	if code := exited(t, done); code != exitOK {
		t.Fatalf("watch exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	wantLines := []string{"contents-modified /w/f generation=2", "contents-modified /w/f generation=3", "handle-invalid /w/f"}
	if len(lines) != len(wantLines) {
		t.Fatalf("watch printed %q", out.String())
	}
	for i, l := range lines {
		f := strings.Fields(l)
		if _, err := time.Parse(time.RFC3339, f[0]); err != nil || strings.Join(f[1:], " ") != wantLines[i] {
			t.Fatalf("line %d %q, want <time> %s", i, l, wantLines[i])
		}
	}

	// JSON, children of a directory, --count.
	out, _, done = watching(t, ctx, "--cell", addr, "watch", "--json", "--count", "3", "--events", "children", "/w")
	want(t, at(t, addr, "", "touch", "/w/g"), exitOK, "", "")
	want(t, at(t, addr, "x", "write", "/w/g"), exitOK, "", "")
	want(t, at(t, addr, "", "rm", "/w/g"), exitOK, "", "")
	if code := exited(t, done); code != exitOK {
		t.Fatalf("watch --count exit %d", code)
	}
	var got []watchLine
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var w watchLine
		if err := json.Unmarshal([]byte(l), &w); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		got = append(got, w)
	}
	if len(got) != 3 || got[0].Kind != "child-added" || got[1].Kind != "child-modified" || got[1].ContentGeneration != 2 ||
		got[2].Kind != "child-removed" || got[0].Child != "g" || got[0].Path != "/w" || got[0].Seq != 1 || got[2].Seq != 3 {
		t.Fatalf("JSON lines %+v", got)
	}

	// Ctrl-C (the context ends): exit 0.
	wctx, stop := context.WithCancel(ctx)
	_, _, done = watching(t, wctx, "--cell", addr, "watch", "/w")
	stop()
	if code := exited(t, done); code != exitOK {
		t.Fatalf("watch after Ctrl-C exit %d", code)
	}

	// Refusals and usage errors.
	want(t, at(t, addr, "", "watch", "/nope"), exitRefused, "", "watch /nope: not found")
	want(t, at(t, addr, "", "watch", "--events", "bogus", "/w"), exitUsage, "", `unknown event "bogus"`)
	want(t, at(t, addr, "", "watch", "--count", "-1", "/w"), exitUsage, "", "--count")
	want(t, at(t, addr, "", "watch"), exitUsage, "", "exactly one PATH")
}

// TestWatchJeopardy: when the cell goes away, watch prints the session's
// jeopardy, and Ctrl-C still ends it at once (exit 0).
func TestWatchJeopardy(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	cell := celltest.Start(t, celltest.Options{Lease: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	want(t, at(t, cell.Addr, "", "touch", "/f"), exitOK, "", "")
	out, errb, done := watching(t, ctx, "--cell", cell.Addr, "watch", "/f")
	cell.Stop()
	// The grace period is 45 s by default; jeopardy comes after the lease.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), "jeopardy"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no jeopardy line: %q %q", out.String(), errb.String())
		}
	}
	cancel() // Ctrl-C in jeopardy: exit 0 without waiting for the grace period
	if code := exited(t, done); code != exitOK {
		t.Fatalf("exit %d", code)
	}
}
