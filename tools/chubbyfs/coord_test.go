package main

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell/celltest"
)

// Tests of the commands built on client/recipe: touch --sequential,
// mkdir --ephemeral, registry, counter.

func TestCoordHelp(t *testing.T) {
	for cmd, flags := range map[string][]string{
		"touch":             {"--sequential", "print the path made", "10-digit counter"},
		"mkdir":             {"--ephemeral", "holds its session", "SIGINT or SIGTERM", "(default: permanent)"},
		"registry":          {"register", "list", "watch", "--dir string", `(default "/registry")`, "session expires"},
		"registry register": {"NAME INSTANCE ADDR", "holds its session", "exists"},
		"registry list":     {"--json", "INSTANCE ADDR", "owner"},
		"registry watch":    {"--count int", "--json", "added=web-2", "not by polling"},
		"counter":           {"next"},
		"counter next":      {"--cas", "compare-and-set", "sequential name", "no gaps"},
	} {
		r := chubbyfs(t, nil, "", append(strings.Fields(cmd), "--help")...)
		for _, f := range flags {
			if r.code != 0 || !strings.Contains(r.stdout, f) {
				t.Errorf("%s --help lacks %q:\n%s", cmd, f, r.stdout)
			}
		}
	}
	if r := chubbyfs(t, nil, "", "--help"); !strings.Contains(r.stdout, "registry") || !strings.Contains(r.stdout, "counter") {
		t.Errorf("--help does not list registry and counter:\n%s", r.stdout)
	}
}

func TestCoordUsageErrors(t *testing.T) {
	dead := celltest.FreeAddr(t) // never contacted: usage errors are found first
	for _, args := range [][]string{
		{"touch", "--sequential"},
		{"mkdir", "--ephemeral"},
		{"mkdir", "--ephemeral", "rel"},
		{"registry"},
		{"registry", "register", "web", "a"},
		{"registry", "register", "web", "a/b", "addr"},
		{"registry", "register", "web", "a", "addr", "extra"},
		{"registry", "list"},
		{"registry", "list", "a/b"},
		{"registry", "list", "bad name"},
		{"registry", "--dir", "rel", "list", "web"},
		{"registry", "watch"},
		{"registry", "watch", "--count", "-1", "web"},
		{"counter"},
		{"counter", "next"},
		{"counter", "next", "/"},
		{"counter", "next", "rel"},
		{"counter", "next", "/a", "/b"},
	} {
		r := chubbyfs(t, nil, "", append([]string{"--cell", dead}, args...)...)
		if r.code != exitUsage || !strings.HasPrefix(r.stderr, "chubbyfs: ") || r.stdout != "" {
			t.Errorf("chubbyfs %q: exit %d, stdout %q, stderr %q; want exit 2 and a message", args, r.code, r.stdout, r.stderr)
		}
	}
}

// TestTouchSequential: touch --sequential prints the names it makes, each
// new; with --ephemeral the file is gone once chubbyfs exits.
func TestTouchSequential(t *testing.T) {
	addr := startCell(t)
	want(t, at(t, addr, "", "mkdir", "/jobs"), exitOK, "", "")
	for i := range 2 {
		r := at(t, addr, "", "touch", "--sequential", "/jobs/job-")
		if r.code != exitOK || r.stdout != "/jobs/job-000000000"+strconv.Itoa(i)+"\n" {
			t.Fatalf("touch --sequential #%d: %+v", i, r)
		}
	}
	want(t, at(t, addr, "", "touch", "--sequential", "--ephemeral", "/jobs/job-"), exitOK, "/jobs/job-0000000002\n", "")
	if r := at(t, addr, "", "ls", "/jobs"); r.stdout != "job-0000000000\njob-0000000001\n" {
		t.Fatalf("ls /jobs = %+v", r)
	}
	want(t, at(t, addr, "", "touch", "--sequential", "/nodir/job-"), exitRefused, "", "not found")
}

// holdInBackground runs a holding command until the returned stop is
// called; stop returns its result.
func holdInBackground(t *testing.T, addr string, args ...string) (stop func() result) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, errb, code := &syncBuffer{}, &syncBuffer{}, make(chan int, 1)
	go func() {
		code <- run(ctx, append([]string{"--cell", addr}, args...), strings.NewReader(""), out, errb, func(string) string { return "" })
	}()
	var once sync.Once
	var r result
	stop = func() result {
		once.Do(func() {
			cancel()
			select {
			case c := <-code:
				r = result{code: c, stdout: out.String(), stderr: errb.String()}
			case <-time.After(20 * time.Second):
				t.Fatalf("chubbyfs %q did not end when interrupted", args)
			}
		})
		return r
	}
	t.Cleanup(func() { stop() })
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(errb.String(), "holding"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("chubbyfs %q does not hold: stderr %q", args, errb.String())
		}
	}
	return stop
}

// TestMkdirEphemeral: mkdir --ephemeral keeps its directory while it
// runs, and the directory goes when it is interrupted.
func TestMkdirEphemeral(t *testing.T) {
	addr := startCell(t)
	stop := holdInBackground(t, addr, "mkdir", "--ephemeral", "/workers")
	want(t, squeeze(at(t, addr, "", "stat", "/workers")), exitOK, "ephemeral: true", "")
	want(t, at(t, addr, "", "ls", "/"), exitOK, "workers\n", "")
	want(t, stop(), exitOK, "", "chubbyfs: holding ephemeral directory /workers")
	want(t, at(t, addr, "", "stat", "/workers"), exitRefused, "", "not found")
	want(t, at(t, addr, "", "mkdir", "--ephemeral", "/no/such"), exitRefused, "", "mkdir /no/such: not found")
}

// TestRegistryCommands: register holds an instance until interrupted;
// list shows the instances (text and JSON); watch prints the set at each
// change.
func TestRegistryCommands(t *testing.T) {
	addr := startCell(t)
	stopA := holdInBackground(t, addr, "registry", "register", "web", "a", "10.0.0.1:80")
	want(t, at(t, addr, "", "registry", "list", "web"), exitOK, "a 10.0.0.1:80\n", "")
	want(t, at(t, addr, "", "registry", "register", "web", "a", "x"), exitRefused, "", "exists")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, errb, watched := &syncBuffer{}, &syncBuffer{}, make(chan int, 1)
	go func() {
		watched <- run(ctx, []string{"--cell", addr, "registry", "watch", "--count", "3", "web"},
			strings.NewReader(""), out, errb, func(string) string { return "" })
	}()
	waitOutput(t, out, "set a=10.0.0.1:80 added=a\n")
	stopB := holdInBackground(t, addr, "registry", "--dir", "/registry", "register", "web", "b", "10.0.0.2:80")
	waitOutput(t, out, "set a=10.0.0.1:80 b=10.0.0.2:80 added=b\n")

	r := at(t, addr, "", "registry", "list", "--json", "web")
	var list []instanceJSON
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 2 || list[1].Instance != "b" || list[1].Addr != "10.0.0.2:80" || list[1].Owner == 0 {
		t.Fatalf("list --json = %q (%v)", r.stdout, err)
	}
	want(t, stopA(), exitOK, "", "holding instance /registry/web/a")
	select {
	case code := <-watched:
		if code != exitOK {
			t.Fatalf("watch exited %d: %s", code, errb.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("watch did not see a leave")
	}
	if got := out.String(); got != "set a=10.0.0.1:80 added=a\nset a=10.0.0.1:80 b=10.0.0.2:80 added=b\nset b=10.0.0.2:80 removed=a\n" {
		t.Fatalf("watch printed %q", got)
	}
	want(t, stopB(), exitOK, "", "")
	want(t, at(t, addr, "", "registry", "list", "web"), exitOK, "", "")
	if r := at(t, addr, "", "registry", "list", "--json", "none"); r.code != exitOK || r.stdout != "[]\n" {
		t.Fatalf("list --json of a service with no instances = %+v", r)
	}
}

// waitOutput waits (bounded) until buf ends with line.
func waitOutput(t *testing.T, buf *syncBuffer, line string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !strings.HasSuffix(buf.String(), line); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("output %q does not end with %q", buf.String(), line)
		}
	}
}

// TestCounterCommand: counter next gives increasing ids from a
// directory's sequential names, and with --cas 1, 2, 3... from a file,
// also to concurrent callers; both start at 1.
func TestCounterCommand(t *testing.T) {
	addr := startCell(t)
	r := at(t, addr, "", "counter", "next", "/ids/seq")
	if r.code != exitOK || r.stdout != "1\n" {
		t.Fatalf("the first counter next = %+v, want 1", r)
	}
	r = at(t, addr, "", "counter", "next", "/ids/seq")
	if r.code != exitOK || r.stdout != "2\n" {
		t.Fatalf("the second counter next = %+v, want 2", r)
	}
	want(t, at(t, addr, "", "ls", "/ids/seq"), exitOK, "", "") // the files are gone
	if r := at(t, addr, "", "counter", "next", "--cas", "/ids/n"); r.code != exitOK || r.stdout != "1\n" {
		t.Fatalf("the first counter next --cas = %+v, want 1", r)
	}
	var wg sync.WaitGroup
	results := make([]result, 6)
	for i := range results {
		wg.Go(func() { results[i] = at(t, addr, "", "counter", "next", "--cas", "/ids/n") })
	}
	wg.Wait()
	var got []int
	for _, r := range results {
		n, err := strconv.Atoi(strings.TrimSpace(r.stdout))
		if r.code != exitOK || err != nil {
			t.Fatalf("counter next --cas: %+v", r)
		}
		got = append(got, n)
	}
	slices.Sort(got)
	if !slices.Equal(got, []int{2, 3, 4, 5, 6, 7}) {
		t.Fatalf("concurrent counter next --cas gave %v, want 2..7", got)
	}
	want(t, at(t, addr, "", "cat", "/ids/n"), exitOK, "7", "")
	want(t, at(t, addr, "", "write", "/ids/bad", "x"), exitOK, "", "")
	want(t, at(t, addr, "", "counter", "next", "--cas", "/ids/bad"), exitRefused, "", "not a counter")
	want(t, at(t, addr, "", "counter", "next", "--cas", "/nodir/n"), exitRefused, "", "not found")
}
