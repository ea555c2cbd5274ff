package main

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/chubbygo/chubby/cell/version"
)

// jsonOf runs the CLI against addr, wants exit code and parses its
// standard output, one JSON value, into v.
func jsonOf(t *testing.T, addr, stdin string, code int, v any, args ...string) {
	t.Helper()
	r := at(t, addr, stdin, args...)
	if r.code != code {
		t.Fatalf("chubbyfs %q: exit %d, want %d; stdout %q, stderr %q", args, r.code, code, r.stdout, r.stderr)
	}
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("chubbyfs %q: %v\n%s", args, err, r.stdout)
	}
	if dec.More() {
		t.Fatalf("chubbyfs %q printed more than one JSON value:\n%s", args, r.stdout)
	}
}

// TestJSONCommands: every printing command's --json is one JSON value of
// the documented shape, agreeing with what the cell holds.
func TestJSONCommands(t *testing.T) {
	addr := startCell(t)
	want(t, at(t, addr, "", "mkdir", "/j"), exitOK, "", "")
	want(t, at(t, addr, "", "write", "/j/text", "héllo\n"), exitOK, "", "")
	binary := []byte{0xff, 0x00, 'a', 0xc3}
	want(t, at(t, addr, string(binary), "write", "/j/bin"), exitOK, "", "")

	var st statJSON
	jsonOf(t, addr, "", exitOK, &st, "stat", "--json", "/j/text")
	if st.Path != "/j/text" || st.Kind != "file" || st.Size != int64(len("héllo\n")) || st.ContentGeneration <= 0 ||
		st.Instance <= 0 || st.ModifyTimeMs <= 0 || st.Lock.Mode != "free" || st.Lock.Path != "/j/text" {
		t.Errorf("stat --json = %+v", st)
	}

	var ls []lsEntryJSON
	jsonOf(t, addr, "", exitOK, &ls, "ls", "--json", "/j")
	if len(ls) != 2 || ls[0].Name != "bin" || ls[0].Path != "/j/bin" || ls[1].Name != "text" ||
		ls[1].Size != st.Size || ls[1].ContentGeneration != st.ContentGeneration {
		t.Errorf("ls --json /j = %+v", ls)
	}
	jsonOf(t, addr, "", exitOK, &ls, "ls", "--json", "/j/text") // a file: itself
	if len(ls) != 1 || ls[0].Name != "text" || ls[0].Path != "/j/text" {
		t.Errorf("ls --json /j/text = %+v", ls)
	}
	var root []lsEntryJSON
	jsonOf(t, addr, "", exitOK, &root, "ls", "--json", "-l")
	if len(root) != 1 || root[0].Name != "j" || root[0].Kind != "directory" || root[0].Size != 2 {
		t.Errorf("ls --json / = %+v", root)
	}
	want(t, at(t, addr, "", "mkdir", "/j/empty"), exitOK, "", "")
	if r := at(t, addr, "", "ls", "--json", "/j/empty"); r.code != exitOK || r.stdout != "[]\n" {
		t.Errorf("ls --json of an empty directory = %+v, want []", r)
	}

	var c catJSON
	jsonOf(t, addr, "", exitOK, &c, "cat", "--json", "/j/text")
	if c != (catJSON{Path: "/j/text", ContentGeneration: st.ContentGeneration, Size: len("héllo\n"), UTF8: true, Data: "héllo\n"}) {
		t.Errorf("cat --json of text = %+v", c)
	}
	jsonOf(t, addr, "", exitOK, &c, "cat", "--json", "/j/bin")
	got, err := base64.StdEncoding.DecodeString(c.Data)
	if c.UTF8 || c.Size != len(binary) || err != nil || string(got) != string(binary) {
		t.Errorf("cat --json of bytes = %+v (decoded %q, %v), want base64 of %q", c, got, err, binary)
	}

	var ts tsJSON
	jsonOf(t, addr, "", exitOK, &ts, "ts", "--json", "5")
	if ts.Count != 5 || ts.First <= 0 || ts.Last != ts.First+4 {
		t.Errorf("ts --json 5 = %+v", ts)
	}
	var after tsJSON
	jsonOf(t, addr, "", exitOK, &after, "ts", "--json")
	if after.Count != 1 || after.First <= ts.Last || after.Last != after.First {
		t.Errorf("ts --json after %+v = %+v", ts, after)
	}

	var acl aclJSON
	jsonOf(t, addr, "", exitOK, &acl, "acl", "get", "--json", "/j")
	if acl.Path != "/j" || acl.Read != "" || acl.Write != "" || acl.ChangeACL != "" {
		t.Errorf("acl get --json = %+v", acl)
	}

	var who whoamiJSON
	jsonOf(t, addr, "", exitOK, &who, "whoami", "--json")
	if who != (whoamiJSON{Principal: "anonymous", TLS: false}) {
		t.Errorf("whoami --json = %+v", who)
	}

	var id counterJSON
	jsonOf(t, addr, "", exitOK, &id, "counter", "next", "--json", "/j/ids")
	if id != (counterJSON{Path: "/j/ids", ID: 1}) {
		t.Errorf("counter next --json = %+v", id)
	}
	jsonOf(t, addr, "", exitOK, &id, "counter", "next", "--cas", "--json", "/j/n")
	if id != (counterJSON{Path: "/j/n", ID: 1}) {
		t.Errorf("counter next --cas --json = %+v", id)
	}

	var tj touchJSON
	jsonOf(t, addr, "", exitOK, &tj, "touch", "--json", "/j/t")
	if tj != (touchJSON{Path: "/j/t", Created: true}) {
		t.Errorf("touch --json = %+v", tj)
	}
	jsonOf(t, addr, "", exitOK, &tj, "touch", "--json", "/j/t")
	if tj != (touchJSON{Path: "/j/t", Created: false}) {
		t.Errorf("touch --json of an existing file = %+v", tj)
	}
	jsonOf(t, addr, "", exitOK, &tj, "touch", "--json", "--sequential", "/j/s-")
	if tj != (touchJSON{Path: "/j/s-0000000000", Created: true}) {
		t.Errorf("touch --json --sequential = %+v", tj)
	}

	var seq sequencerJSON
	jsonOf(t, addr, "", exitRefused, &seq, "sequencer", "check", "--json", "chubby-seq:v1:E:1:1:/j/text")
	if seq.Valid || seq.Reason == "" {
		t.Errorf("sequencer check --json of a free lock = %+v", seq)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "seq.json")
	want(t, at(t, addr, "", "lock", "/j/text", "--", "sh", "-c",
		`"$0" --cell "$1" sequencer check --json "$CHUBBY_SEQUENCER" > "$2"`, buildChubbyfs(t), addr, out), exitOK, "", "")
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &seq); err != nil || seq != (sequencerJSON{Valid: true}) {
		t.Errorf("sequencer check --json of a held lock printed %q (%v)", data, err)
	}

	var txn txnJSON
	jsonOf(t, addr, "if exists /j/text\ncreate /j/new made\ndelete /j/t\n", exitOK, &txn, "txn", "--json")
	if len(txn.Changes) != 2 || txn.Changes[0].Op != "create" || txn.Changes[0].Path != "/j/new" ||
		txn.Changes[0].ContentGeneration <= 0 || txn.Changes[1].Op != "delete" || txn.Changes[1].Path != "/j/t" {
		t.Errorf("txn --json = %+v", txn)
	}
	want(t, at(t, addr, "", "cat", "/j/new"), exitOK, "made", "")

	// A failure is text on standard error, whatever --json says.
	r := at(t, addr, "", "stat", "--json", "/j/missing")
	want(t, r, exitRefused, "", "chubbyfs: stat /j/missing: not found")
	if r.stdout != "" {
		t.Errorf("a failed stat --json printed %q", r.stdout)
	}

	// The version the cell reports is the one --version prints.
	var status statusJSON
	jsonOf(t, addr, "", exitOK, &status, "status", "--json")
	if v := chubbyfs(t, nil, "", "--version"); !strings.HasPrefix(v.stdout, "chubbyfs v"+status.Version+" (") {
		t.Errorf("status says version %q, --version %q", status.Version, v.stdout)
	}
}

// buildChubbyfs builds this command, for tests that run it as a process.
func buildChubbyfs(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "chubbyfs")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestVersionFlag: --version (and -v) print one line: the version, the
// commit (unknown in a test binary, which records none) and Go's version.
func TestVersionFlag(t *testing.T) {
	line := regexp.MustCompile(`^chubbyfs v` + regexp.QuoteMeta(version.Number) + ` \(commit (?:[0-9a-f]{1,12}|unknown)(?:, modified)?\) ` +
		regexp.QuoteMeta(runtime.Version()) + "\n$")
	for _, flag := range []string{"--version", "-v"} {
		r := chubbyfs(t, nil, "", flag)
		if r.code != exitOK || !line.MatchString(r.stdout) || r.stderr != "" {
			t.Errorf("chubbyfs %s = %+v, want one line matching %s", flag, r, line)
		}
	}
}

// TestCompletion: chubbyfs completion SHELL prints a completion script
// that knows the commands.
func TestCompletion(t *testing.T) {
	for shell, marker := range map[string]string{
		"bash": "__start_chubbyfs", "zsh": "#compdef chubbyfs", "fish": "complete -c chubbyfs", "powershell": "Register-ArgumentCompleter",
	} {
		r := chubbyfs(t, nil, "", "completion", shell)
		if r.code != exitOK || !strings.Contains(r.stdout, marker) || r.stderr != "" {
			t.Errorf("completion %s: exit %d, %d bytes without %q, stderr %q", shell, r.code, len(r.stdout), marker, r.stderr)
		}
	}
	// The script asks chubbyfs itself for the words: here, the commands.
	r := chubbyfs(t, nil, "", "__complete", "cou")
	if r.code != exitOK || !strings.Contains(r.stdout, "counter") {
		t.Errorf("__complete cou = %+v, want counter", r)
	}
	want(t, chubbyfs(t, nil, "", "completion", "tcsh"), exitUsage, "", "Run 'chubbyfs completion --help'")
	want(t, chubbyfs(t, nil, "", "completion"), exitUsage, "", "completion needs a shell")
}

// TestPathCompletion: TAB on a PATH lists the cell's children of the
// directory typed so far, directories with a "/" to go on into them.
func TestPathCompletion(t *testing.T) {
	addr := startCell(t)
	want(t, at(t, addr, "", "mkdir", "-p", "/cpl/dir"), exitOK, "", "")
	want(t, at(t, addr, "", "write", "/cpl/file", "x"), exitOK, "", "")
	want(t, at(t, addr, "", "write", "/cpl/other", "x"), exitOK, "", "")
	complete := func(args ...string) string {
		t.Helper()
		r := chubbyfs(t, nil, "", append([]string{"__complete", "--cell", addr}, args...)...)
		if r.code != exitOK {
			t.Fatalf("__complete %q: %+v", args, r)
		}
		return r.stdout
	}
	// Directive 6: no file completion, no space after a directory.
	if got := complete("cat", "/cpl/"); got != "/cpl/dir/\n/cpl/file\n/cpl/other\n:6\n" {
		t.Errorf("cat /cpl/<TAB> = %q", got)
	}
	if got := complete("ls", "/cpl/f"); got != "/cpl/file\n:4\n" {
		t.Errorf("ls /cpl/f<TAB> = %q", got)
	}
	if got := complete("stat", "/c"); got != "/cpl/\n:6\n" {
		t.Errorf("stat /c<TAB> = %q", got)
	}
	if got := complete("cat", "/cpl/file", ""); got != ":4\n" {
		t.Errorf("cat /cpl/file <TAB> = %q, want nothing", got)
	}
	if got := complete("lock", "/cpl/file", ""); got != ":0\n" {
		t.Errorf("lock /cpl/file <TAB> = %q, want the shell's own (files)", got)
	}
	if got := complete("cat", "/nowhere/"); got != ":4\n" {
		t.Errorf("cat /nowhere/<TAB> = %q, want nothing", got)
	}
	if got := complete("acl", ""); !strings.HasPrefix(got, "get\t") || strings.Contains(got, "/cpl") {
		t.Errorf("acl <TAB> = %q, want get and set only", got)
	}
}
