package fs

import (
	"slices"
	"strings"
	"testing"

	"github.com/chubbygo/chubby/gen/chubby"
)

// TestValidPrincipal: a principal is 1..128 bytes of [A-Za-z0-9._@:/+=-].
func TestValidPrincipal(t *testing.T) {
	tests := []struct {
		p  string
		ok bool
	}{
		{"bob", true},
		{Anonymous, true},
		{"alice@EXAMPLE.COM", true},
		{"spiffe://cell/ns/x", true},
		{"a+b=c:d_e-f.g", true},
		{strings.Repeat("p", 128), true},
		{"", false},
		{strings.Repeat("p", 129), false},
		{"bob smith", false},
		{"bob#1", false},
		{"*", false},
		{"bob\n", false},
		{"bob\t", false},
		{"böb", false},
	}
	for _, tt := range tests {
		err := ValidPrincipal(tt.p)
		if (err == nil) != tt.ok || err != nil && Code(err) != chubby.ErrorCode_INVALID_ARGUMENT {
			t.Errorf("ValidPrincipal(%q) = %v, want ok=%v", tt.p, err, tt.ok)
		}
	}
}

// TestParseACL: the file format, and what each parse grants.
func TestParseACL(t *testing.T) {
	tests := []struct {
		name    string
		content string
		entries []string // nil with wantErr
		wantErr string   // a substring of the error
	}{
		{"empty", "", []string{}, ""},
		{"comments and blank lines", "# admins\n\n  \t\n#bob\n", []string{}, ""},
		{"one per line", "bob\nalice\n", []string{"alice", "bob"}, ""},
		{"no final newline", "bob", []string{"bob"}, ""},
		{"CRLF", "bob\r\nalice\r\n", []string{"alice", "bob"}, ""},
		{"spaces and tabs trimmed", "  bob\t\n\talice  \n", []string{"alice", "bob"}, ""},
		{"indented comment", "   # a comment\nbob", []string{"bob"}, ""},
		{"repeats", "bob\nbob\n", []string{"bob"}, ""},
		{"star", "*\n", []string{"*"}, ""},
		{"anonymous", "anonymous\n*\n", []string{"*", "anonymous"}, ""},
		{"space inside", "bob\nbob smith\n", nil, "line 2"},
		{"trailing comment", "bob # admin\n", nil, "line 1"},
		{"star in a name", "\n\nbo*\n", nil, "line 3"},
		{"too long", strings.Repeat("p", 129), nil, "more than 128"},
		{"too many", strings.Repeat("bob\n", 1001), nil, "line 1001: more than 1000 entries"},
		{"just enough", strings.Repeat("bob\n", 1000) + "# x\n", []string{"bob"}, ""},
	}
	for _, tt := range tests {
		a, err := ParseACL([]byte(tt.content))
		if tt.wantErr != "" {
			if err == nil || Code(err) != chubby.ErrorCode_INVALID_ARGUMENT || !strings.Contains(err.Error(), tt.wantErr) || a != nil {
				t.Errorf("%s: ParseACL = %v, %v; want an error with %q", tt.name, a, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(a.Entries(), tt.entries) {
			t.Errorf("%s: ParseACL = %v, %v; want %v", tt.name, a.Entries(), err, tt.entries)
		}
	}
}

// TestACLAllows: "*" is every principal but Anonymous; Anonymous only when
// listed; a nil ACL (a missing or invalid file) grants nobody.
func TestACLAllows(t *testing.T) {
	parse := func(s string) *ACL {
		a, err := ParseACL([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	tests := []struct {
		acl       *ACL
		principal string
		want      bool
	}{
		{parse("bob"), "bob", true},
		{parse("bob"), "alice", false},
		{parse("bob"), Anonymous, false},
		{parse("*"), "alice", true},
		{parse("*"), Anonymous, false},
		{parse("anonymous"), Anonymous, true},
		{parse("anonymous"), "bob", false},
		{parse(""), "bob", false},
		{nil, "bob", false},
		{nil, Anonymous, false},
	}
	for _, tt := range tests {
		if got := tt.acl.Allows(tt.principal); got != tt.want {
			t.Errorf("%v.Allows(%q) = %v, want %v", tt.acl.Entries(), tt.principal, got, tt.want)
		}
	}
}

func TestRightString(t *testing.T) {
	for r, want := range map[Right]string{ReadRight: "read", WriteRight: "write", ChangeACLRight: "change_acl", Right(7): "right(7)"} {
		if r.String() != want {
			t.Errorf("Right(%d) = %q, want %q", int(r), r, want)
		}
	}
}

// FuzzParseACL: ParseACL never panics; an ACL it accepts re-serialises
// (Entries, one per line) to a file that parses to the same ACL, and that
// agrees with it on every principal it lists.
func FuzzParseACL(f *testing.F) {
	for _, seed := range []string{"", "bob\n", "*\r\nanonymous\n# c\n\n", " \tbob \n", "bob smith", "#\n#\n*", strings.Repeat("x\n", 1001)} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := ParseACL(b)
		if err != nil {
			if a != nil || Code(err) != chubby.ErrorCode_INVALID_ARGUMENT {
				t.Fatalf("refusal %v with ACL %v", err, a)
			}
			return
		}
		entries := a.Entries()
		again, err := ParseACL([]byte(strings.Join(entries, "\n")))
		if err != nil || !slices.Equal(again.Entries(), entries) {
			t.Fatalf("re-serialised %q parses to %v, %v", entries, again.Entries(), err)
		}
		for _, p := range append(entries, Anonymous, "someone-else") {
			if a.Allows(p) != again.Allows(p) {
				t.Fatalf("Allows(%q) differs after re-serialising", p)
			}
		}
	})
}
