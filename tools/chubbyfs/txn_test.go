package main

import (
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
