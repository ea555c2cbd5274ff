package main

import (
	"github.com/chubbygo/chubby/cell/celltest"
	"strings"
	"testing"

	"github.com/chubbygo/chubby/gen/chubby"
)

func TestParseTxn(t *testing.T) {
	script := `# move a token from a to b, if nobody moved it meanwhile
if exists /a/token
if generation /a/token 3
if not-exists /b/token
create /b/token hello world
delete /a/token
mkdir /c
write-if /c2 7 v2
ephemeral /e mine
delete-recursive /d
write /w
`
	cmps, ops, lines, err := parseTxn(strings.NewReader(script))
	if err != nil {
		t.Fatal(err)
	}
	if len(cmps) != 3 || len(ops) != 7 || lines[1] != 3 {
		t.Fatalf("%d compares (lines %v), %d ops", len(cmps), lines, len(ops))
	}
	if cmps[1].Kind != chubby.CompareKind_CONTENT_GENERATION || cmps[1].GetValue() != 3 || cmps[2].Kind != chubby.CompareKind_NOT_EXISTS {
		t.Errorf("compares %+v", cmps)
	}
	if string(ops[0].Content) != "hello world" || ops[1].Kind != chubby.MultiOpKind_DELETE || !ops[2].GetDirectory() ||
		ops[3].GetExpectedGeneration() != 7 || string(ops[3].Content) != "v2" || !ops[4].GetEphemeral() || !ops[5].GetRecursive() ||
		ops[6].Content == nil {
		t.Errorf("ops %+v", ops)
	}
	for _, bad := range []string{
		"",                             // no change
		"if exists /a\n",               // no change
		"create /a\nif exists /a\n",    // condition after a change
		"if generation /a x\nwrite /a", // not a number
		"if sometimes /a\nwrite /a",
		"mkdir /a extra\n",
		"frobnicate /a\n",
		"write\n",
	} {
		if _, _, _, err := parseTxn(strings.NewReader(bad)); err == nil {
			t.Errorf("script %q accepted", bad)
		}
	}
}

// TestTxnCommand: a script applied, one whose condition fails (nothing
// applied), one whose change is refused (nothing applied).
func TestTxnCommand(t *testing.T) {
	c := celltest.Start(t, celltest.Options{})
	want(t, at(t, c.Addr, "v1", "write", "/a"), exitOK, "", "")
	want(t, at(t, c.Addr, "if exists /a\nif not-exists /b\ncreate /b moved\ndelete /a\n", "txn"), exitOK, "create /b generation=1", "")
	want(t, at(t, c.Addr, "", "cat", "/b"), exitOK, "moved", "")
	want(t, at(t, c.Addr, "", "stat", "/a"), exitRefused, "", "not found")
	// The condition fails: nothing happens.
	want(t, at(t, c.Addr, "if exists /a\ncreate /c x\n", "txn"), exitRefused, "", "line 1 does not hold: exists /a")
	want(t, at(t, c.Addr, "", "stat", "/c"), exitRefused, "", "not found")
	// The second change fails: the first is not applied either.
	want(t, at(t, c.Addr, "create /d x\ncreate /b again\n", "txn"), exitRefused, "", "op 1")
	want(t, at(t, c.Addr, "", "stat", "/d"), exitRefused, "", "not found")
	want(t, at(t, c.Addr, "frobnicate /x\n", "txn"), exitUsage, "", "line 1")
}
