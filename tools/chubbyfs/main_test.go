package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/gen/chubby"
)

// result is one run of the CLI.
type result struct {
	code           int
	stdout, stderr string
}

// chubbyfs runs the CLI in-process with env as its environment for
// CHUBBY_CELL, stdin as its standard input, and returns what it did.
func chubbyfs(t *testing.T, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	var out, errb syncBuffer
	code := run(context.Background(), args, strings.NewReader(stdin), &out, &errb,
		func(k string) string { return env[k] })
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// at runs the CLI against the cell at addr.
func at(t *testing.T, addr, stdin string, args ...string) result {
	t.Helper()
	return chubbyfs(t, nil, stdin, append([]string{"--cell", addr}, args...)...)
}

func want(t *testing.T, r result, code int, stdoutHas, stderrHas string) {
	t.Helper()
	if r.code != code || !strings.Contains(r.stdout, stdoutHas) || !strings.Contains(r.stderr, stderrHas) {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
			r.code, r.stdout, r.stderr, code, stdoutHas, stderrHas)
	}
}

func TestUsageErrors(t *testing.T) {
	dead := celltest.FreeAddr(t) // never contacted: usage errors are found first
	tests := [][]string{
		{},
		{"frob"},
		{"--bogus", "status"},
		{"--timeout", "soon", "status"},
		{"--cell", "no-port", "status"},
		{"--cell", "a:1,,b:2", "status"},
		{"ls", "relative"},
		{"ls", "/a", "/b"},
		{"ls", "-x", "/"},
		{"stat"},
		{"stat", "/a/"},
		{"cat"},
		{"cat", "/a//b"},
		{"cat", "/a", "/b"},
		{"write"},
		{"write", "/a", "x", "y"},
		{"write", "--if-generation", "x", "/a", "d"},
		{"write", "/bad name", "d"},
		{"mkdir"},
		{"mkdir", "/a/../b"},
		{"rm", "/"},
		{"rm", "a"},
		{"touch", "/a:b"},
		{"lock"},
		{"lock", "/x"},
		{"lock", "/x", "--"},
		{"lock", "x", "--", "true"},
		{"lock", "--lock-delay", "2m", "/x", "--", "true"},
		{"lock", "--timeout", "-1s", "/x", "--", "true"},
		{"lock", "--lost-signal", "BOGUS", "/x", "--", "true"},
		{"lock", "--lost-grace", "-1s", "/x", "--", "true"},
		{"election", "campaign", "--lost-signal", "9x", "/x", "--", "true"},
		{"sequencer"},
		{"sequencer", "check"},
		{"sequencer", "check", "garbage"},
		{"sequencer", "check", "chubby-seq:v1:E:01:1:/a"},
		{"sequencer", "check", "chubby-seq:v1:E:1:1:/a", "extra"},
		{"status", "extra"},
		{"members", "extra"},
		{"members", "--json", "extra"},
		{"members", "remove"},
		{"members", "remove", "1", "2"},
		{"members", "remove", "abc"},
		{"members", "remove", "0"},
		{"members", "remove", "-1"},
	}
	for _, args := range tests {
		r := chubbyfs(t, nil, "", append([]string{"--cell", dead}, args...)...)
		if r.code != exitUsage || !strings.HasPrefix(r.stderr, "chubbyfs: ") || r.stdout != "" {
			t.Errorf("chubbyfs %q: exit %d, stdout %q, stderr %q; want exit 2 and a message",
				args, r.code, r.stdout, r.stderr)
		}
	}
	// A bad CHUBBY_CELL is a usage error too.
	r := chubbyfs(t, map[string]string{"CHUBBY_CELL": "nope"}, "", "status")
	want(t, r, exitUsage, "", "CHUBBY_CELL")
}

// TestUnreachableCell: a cell where nothing listens is reported as such,
// not in the transport's words ("connection has been closed by peer").
func TestUnreachableCell(t *testing.T) {
	dead := celltest.FreeAddr(t)
	start := time.Now()
	r := at(t, dead, "", "cat", "/a")
	want(t, r, exitRefused, "", "chubbyfs: cat /a: cannot reach the cell: nothing listens at "+dead+"\n")
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v to give up", d)
	}
	// CHUBBY_CELL is used when --cell is absent; every address is named.
	dead2 := celltest.FreeAddr(t)
	r = chubbyfs(t, map[string]string{"CHUBBY_CELL": dead + "," + dead2}, "", "status")
	want(t, r, exitRefused, "", "chubbyfs: status: cannot reach the cell: nothing listens at "+dead+", "+dead2+"\n")
	if strings.Contains(r.stderr, "closed by peer") {
		t.Errorf("stderr %q repeats the transport's words", r.stderr)
	}
}

func TestHelpListsFlagsWithDefaults(t *testing.T) {
	r := chubbyfs(t, nil, "", "--help")
	want(t, r, exitOK, "--cell", "")
	for _, s := range []string{"--timeout duration", "(default 30s)", "CHUBBY_CELL", "127.0.0.1:7000", "Exit status", "members"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("--help lacks %q", s)
		}
	}
	for cmd, flags := range map[string][]string{
		"ls":      {"-l, --long", "default: names only"},
		"write":   {"--if-generation int", "(default -1)"},
		"mkdir":   {"-p, --parents", "default: off"},
		"rm":      {"-r, --recursive", "default: off"},
		"touch":   {"--ephemeral", "default: permanent", "deleted as soon as chubbyfs exits"},
		"lock":    {"--shared", "--timeout duration", "default 0: wait as long as it takes", "--lock-delay duration", "(default 15s)", "CHUBBY_SEQUENCER", "--lost-signal string", `(default "TERM")`, "--lost-grace duration", "(default 10s)", "the file is deleted"},
		"status":  {"--json", "default: text"},
		"members": {"--json", "default: text", "remove", "MEMBERSHIP", "LAST CONTACT", "pending_config"},
		"watch":   {"--events string", `(default "all")`, "--json", "--count int", "handle-invalid", "master-changed"},
		"cat":     {"--json", "base64", `"utf8"`},
		"stat":    {"--json", `"content_generation"`},
	} {
		r := chubbyfs(t, nil, "", cmd, "--help")
		for _, f := range flags {
			if r.code != 0 || !strings.Contains(r.stdout, f) {
				t.Errorf("%s --help lacks %q:\n%s", cmd, f, r.stdout)
			}
		}
	}
}

// TestEveryPrintingCommandHasJSON: each command that prints to standard
// output has --json, with the shape in its --help. It walks the whole
// command tree, so a new command must either have --json or be named
// below with the reason it prints nothing of its own.
func TestEveryPrintingCommandHasJSON(t *testing.T) {
	const group = "a group: alone it is a usage error"
	quiet := map[string]string{
		"chubbyfs mkdir":             "prints nothing",
		"chubbyfs write":             "prints nothing",
		"chubbyfs rm":                "prints nothing",
		"chubbyfs lock":              "its standard output is the command's it runs",
		"chubbyfs election campaign": "its standard output is the command's it runs",
		"chubbyfs registry register": "prints nothing (its notice is on standard error)",
		"chubbyfs acl":               group,
		"chubbyfs counter":           group,
		"chubbyfs election":          group,
		"chubbyfs registry":          group,
		"chubbyfs sequencer":         group,
		"chubbyfs snapshot":          group,
	}
	var cmds []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Name() == "help" || sub.Name() == "completion" || sub.Hidden {
				continue // cobra's own
			}
			if sub.Runnable() {
				cmds = append(cmds, sub)
			}
			walk(sub)
		}
	}
	walk((&app{}).rootCommand())
	if len(cmds) < 30 {
		t.Fatalf("found only %d commands", len(cmds))
	}
	for _, c := range cmds {
		path := c.CommandPath()
		if _, ok := quiet[path]; ok {
			delete(quiet, path)
			continue
		}
		r := chubbyfs(t, nil, "", append(strings.Fields(path)[1:], "--help")...)
		if r.code != exitOK || !strings.Contains(r.stdout, "--json") || !strings.Contains(r.stdout, `{"`) {
			t.Errorf("%s --help lacks --json or its shape:\n%s", path, r.stdout)
		}
	}
	for path := range quiet {
		t.Errorf("%s is exempted from --json but is no command", path)
	}
}

// TestCommands runs every command against a real cell.
func TestCommands(t *testing.T) {
	addr := startCell(t)

	r := at(t, addr, "", "status")
	want(t, r, exitOK, "master:", "")
	if !strings.Contains(r.stdout, addr) {
		t.Errorf("status does not name the master's address:\n%s", r.stdout)
	}
	r = at(t, addr, "", "status", "--json")
	want(t, r, exitOK, "{", "")
	var st statusJSON
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	if st.MasterAddress != addr || len(st.Replicas) != 1 || st.Replicas[0].Role != "MASTER" || st.Epoch <= 0 {
		t.Errorf("status --json = %+v", st)
	}
	// CHUBBY_CELL is used when --cell is absent.
	want(t, chubbyfs(t, map[string]string{"CHUBBY_CELL": addr}, "", "status"), exitOK, addr, "")

	want(t, at(t, addr, "", "mkdir", "/cli"), exitOK, "", "")
	want(t, at(t, addr, "", "mkdir", "/cli"), exitRefused, "", "chubbyfs: mkdir /cli: exists")
	want(t, at(t, addr, "", "mkdir", "-p", "/cli/sub/deep"), exitOK, "", "")
	want(t, at(t, addr, "", "mkdir", "/nope/x"), exitRefused, "", "not found")

	want(t, at(t, addr, "", "write", "/cli/f", "hello"), exitOK, "", "")
	r = at(t, addr, "", "cat", "/cli/f")
	if r.code != 0 || r.stdout != "hello" {
		t.Fatalf("cat = %+v", r)
	}
	want(t, at(t, addr, "from stdin\n", "write", "/cli/f"), exitOK, "", "")
	if r := at(t, addr, "", "cat", "/cli/f"); r.stdout != "from stdin\n" {
		t.Fatalf("cat after write from stdin = %+v", r)
	}
	want(t, at(t, addr, "", "cat", "/cli/missing"), exitRefused, "", "chubbyfs: cat /cli/missing: not found")
	want(t, at(t, addr, "", "cat", "/cli"), exitRefused, "", "cat /cli: is directory")
	want(t, at(t, addr, strings.Repeat("x", chubby.MAX_CONTENT_BYTES+10), "write", "/cli/big"), exitRefused, "", "too large")

	r = at(t, addr, "", "stat", "/cli/f")
	want(t, r, exitOK, "content_generation:", "")
	for _, s := range []string{"path:", "/cli/f", "kind:", "file", "size:", "11", "lock:", "free", "instance:"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("stat lacks %q:\n%s", s, r.stdout)
		}
	}
	gen := regexp.MustCompile(`content_generation:\s+(\d+)`).FindStringSubmatch(r.stdout)
	if gen == nil {
		t.Fatalf("no generation in stat:\n%s", r.stdout)
	}
	want(t, at(t, addr, "", "write", "--if-generation", gen[1], "/cli/f", "cas"), exitOK, "", "")
	want(t, at(t, addr, "", "write", "--if-generation", gen[1], "/cli/f", "again"), exitRefused, "", "generation mismatch")
	want(t, at(t, addr, "", "write", "--if-generation", "1", "/cli/none", "x"), exitRefused, "", "not found")
	if r := at(t, addr, "", "cat", "/cli/f"); r.stdout != "cas" {
		t.Fatalf("cat after CAS = %+v", r)
	}
	want(t, at(t, addr, "", "stat", "/cli"), exitOK, "directory", "")

	want(t, at(t, addr, "", "touch", "/cli/t"), exitOK, "", "")
	want(t, at(t, addr, "", "touch", "/cli/t"), exitOK, "", "") // exists: fine
	want(t, at(t, addr, "", "touch", "--ephemeral", "/cli/e"), exitOK, "", "")
	r = at(t, addr, "", "ls", "/cli")
	if r.code != 0 || r.stdout != "f\nsub\nt\n" {
		t.Fatalf("ls /cli = %+v (the ephemeral file should be gone with touch's session)", r)
	}
	r = at(t, addr, "", "ls", "-l", "/cli")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "--") || !strings.HasSuffix(lines[0], " f") ||
		!strings.HasPrefix(lines[1], "d-") || !strings.HasSuffix(lines[1], " sub") {
		t.Fatalf("ls -l /cli = %+v", r)
	}
	want(t, at(t, addr, "", "ls", "/cli/f"), exitOK, "f\n", "")
	want(t, at(t, addr, "", "ls"), exitOK, "cli\n", "")
	want(t, at(t, addr, "", "ls", "/cli/zz"), exitRefused, "", "ls /cli/zz: not found")

	want(t, at(t, addr, "", "rm", "/cli/sub"), exitRefused, "", "rm /cli/sub: not empty")
	want(t, at(t, addr, "", "rm", "-r", "/cli/sub"), exitOK, "", "")
	want(t, at(t, addr, "", "rm", "/cli/t"), exitOK, "", "")
	want(t, at(t, addr, "", "rm", "/cli/t"), exitRefused, "", "not found")
	if r := at(t, addr, "", "ls", "/cli"); r.stdout != "f\n" {
		t.Fatalf("ls after rm = %+v", r)
	}

	want(t, at(t, addr, "", "sequencer", "check", "chubby-seq:v1:E:1:1:/cli/f"), exitRefused, "not valid: ", "")
}

// TestLock: lock runs COMMAND with the sequencer, passes I/O and its exit
// status through, excludes other holders while it runs, and releases.
func TestLock(t *testing.T) {
	addr := startCell(t)
	dir := t.TempDir()
	want(t, at(t, addr, "", "mkdir", "/locks"), exitOK, "", "")

	r := at(t, addr, "piped in\n", "lock", "/locks/a", "--", "sh", "-c", `echo "seq=$CHUBBY_SEQUENCER"; cat; exit 3`)
	if r.code != 3 || !strings.Contains(r.stdout, "piped in\n") {
		t.Fatalf("lock = %+v, want exit 3 and stdin passed through", r)
	}
	m := regexp.MustCompile(`seq=(chubby-seq:v1:E:\d+:\d+:/locks/a)\n`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("no sequencer in COMMAND's output: %q", r.stdout)
	}
	// Released once COMMAND ended.
	want(t, at(t, addr, "", "sequencer", "check", m[1]), exitRefused, "not valid", "")
	want(t, at(t, addr, "", "lock", "--lock-delay", "0", "/locks/a", "--", "true"), exitOK, "", "")
	want(t, at(t, addr, "", "lock", "/locks/a", "--", "sh", "-c", "exit 0"), exitOK, "", "")
	// Without the "--".
	want(t, at(t, addr, "", "lock", "--shared", "/locks/a", "sh", "-c", "echo $CHUBBY_SEQUENCER"), exitOK, "chubby-seq:v1:S:", "")

	// Hold the lock in the background until told to stop.
	held, stop, seqFile := filepath.Join(dir, "held"), filepath.Join(dir, "stop"), filepath.Join(dir, "seq")
	script := `echo "$CHUBBY_SEQUENCER" > ` + seqFile + `; touch ` + held + `; while [ ! -e ` + stop + ` ]; do sleep 0.02; done; exit 5`
	bg := make(chan result, 1)
	go func() { bg <- at(t, addr, "", "lock", "/locks/a", "--", "sh", "-c", script) }()
	waitFile(t, held)
	seqText, err := os.ReadFile(seqFile)
	if err != nil {
		t.Fatal(err)
	}
	seq := strings.TrimSpace(string(seqText))
	want(t, at(t, addr, "", "sequencer", "check", seq), exitOK, "valid\n", "")
	want(t, at(t, addr, "", "lock", "--timeout", "300ms", "/locks/a", "--", "true"), exitRefused, "", "lock /locks/a: not granted within 300ms")
	want(t, at(t, addr, "", "lock", "--shared", "--timeout", "200ms", "/locks/a", "--", "true"), exitRefused, "", "not granted")
	r = at(t, addr, "", "stat", "/locks/a")
	want(t, r, exitOK, "held exclusive", "")
	os.WriteFile(stop, nil, 0o644)
	select {
	case r := <-bg:
		want(t, r, 5, "", "")
	case <-time.After(20 * time.Second):
		t.Fatal("background lock did not end")
	}
	want(t, at(t, addr, "", "sequencer", "check", seq), exitRefused, "not valid", "")

	// A COMMAND that cannot be run.
	want(t, at(t, addr, "", "lock", "/locks/a", "--", "/no/such/program"), exitNotFound, "", "cannot run")
	// A missing parent directory is refused by the cell.
	want(t, at(t, addr, "", "lock", "/nodir/x", "--", "true"), exitRefused, "", "lock /nodir/x: not found")
}

// TestLockForwardsSignals: SIGTERM to chubbyfs reaches COMMAND, and lock
// exits with COMMAND's status.
func TestLockForwardsSignals(t *testing.T) {
	addr := startCell(t)
	held := filepath.Join(t.TempDir(), "held")
	done := make(chan result, 1)
	go func() {
		done <- at(t, addr, "", "lock", "/sig", "--", "sh", "-c",
			`trap 'echo got-term; exit 7' TERM; touch `+held+`; while true; do sleep 0.02; done`)
	}()
	waitFile(t, held)
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		want(t, r, 7, "got-term", "")
	case <-time.After(20 * time.Second):
		t.Fatal("lock did not end after SIGTERM")
	}
	// The lock was released.
	want(t, at(t, addr, "", "lock", "--timeout", "1s", "/sig", "--", "true"), exitOK, "", "")
}

// TestLockOutlivesLease: the session (and so the lock) lives on through
// many leases while COMMAND runs.
func TestLockOutlivesLease(t *testing.T) {
	cell := startCellLease(t, time.Second)
	want(t, at(t, cell.Addr, "", "lock", "/long", "--", "sh", "-c", "sleep 3; echo done"), exitOK, "done", "")
}

// TestLockSessionLost: when the session is lost while COMMAND runs, COMMAND
// gets SIGTERM, the loss is reported and lock exits 1.
func TestLockSessionLost(t *testing.T) {
	cell := startCellLease(t, time.Second)
	held := filepath.Join(t.TempDir(), "held")
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		done <- at(t, cell.Addr, "", "lock", "/lost", "--", "sh", "-c",
			`trap 'echo got-term; exit 0' TERM; touch `+held+`; while true; do sleep 0.02; done`)
	}()
	waitFile(t, held)
	cell.Stop()
	select {
	case r := <-done:
		want(t, r, exitRefused, "got-term", "session in jeopardy")
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("noticed the loss after %v with a 1s lease", d)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("lock did not end after its session was lost")
	}
}

func waitFile(t *testing.T, name string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(name); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLockSummary(t *testing.T) {
	ex, sh := chubby.LockMode_EXCLUSIVE, chubby.LockMode_SHARED
	for _, tc := range []struct {
		li   *chubby.LockInfo
		want string
	}{
		{nil, "-"},
		{&chubby.LockInfo{}, "-"},
		{&chubby.LockInfo{Mode: &ex, Holders: 1}, "E"},
		{&chubby.LockInfo{Mode: &sh, Holders: 3, Waiters: 2}, "S3+2w"},
		{&chubby.LockInfo{DelayRemainingMs: 100}, "-,delay"},
	} {
		if got := lockSummary(tc.li); got != tc.want {
			t.Errorf("lockSummary(%+v) = %q, want %q", tc.li, got, tc.want)
		}
	}
	if got := exitStatusOf(t, "exit 4"); got != 4 {
		t.Errorf("exit status %d", got)
	}
	if got := exitStatusOf(t, "kill -TERM $$"); got != 128+int(syscall.SIGTERM) {
		t.Errorf("killed by SIGTERM: status %d", got)
	}
}

func exitStatusOf(t *testing.T, script string) int {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	code, err := exitStatus(cmd.Run())
	if err != nil {
		t.Fatal(err)
	}
	return code
}

// TestUsageErrorNamesSubcommandHelp: a usage error points at the help of
// the command that was misused, not only at the top-level help.
func TestUsageErrorNamesSubcommandHelp(t *testing.T) {
	dead := celltest.FreeAddr(t) // never contacted
	for _, tc := range []struct {
		args []string
		help string
	}{
		{[]string{"lock", "/x"}, "Run 'chubbyfs lock --help'"},
		{[]string{"ls", "-x", "/"}, "Run 'chubbyfs ls --help'"},
		{[]string{"counter", "next"}, "Run 'chubbyfs counter next --help'"},
		{[]string{"members", "remove", "abc"}, "Run 'chubbyfs members remove --help'"},
		{[]string{"frob"}, "Run 'chubbyfs --help'"},
	} {
		r := chubbyfs(t, nil, "", append([]string{"--cell", dead}, tc.args...)...)
		want(t, r, exitUsage, "", tc.help)
	}
}
