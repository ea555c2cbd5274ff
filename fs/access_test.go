package fs

import (
	"strings"
	"testing"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// sessionAs creates a session acting as principal.
func (h *harness) sessionAs(principal string) chubby.SessionID {
	h.t.Helper()
	res, _ := h.cmd(&fsm.Command{Principal: &principal, Op: opCreateSession(principal)})
	if res.Err != nil {
		h.t.Fatalf("CreateSession as %q: %v", principal, res.Err)
	}
	return *res.Session
}

// TestSessionPrincipal: CreateSession stores Command.principal (Anonymous
// when unset); a bad one is refused and makes no session; no other
// command may carry one.
func TestSessionPrincipal(t *testing.T) {
	tests := []struct {
		name      string
		principal *string
		want      string           // the session's principal
		code      chubby.ErrorCode // 0: created
	}{
		{"unset", nil, Anonymous, 0},
		{"a principal", ptr("bob@EXAMPLE"), "bob@EXAMPLE", 0},
		{"anonymous", ptr(Anonymous), Anonymous, 0},
		{"empty", ptr(""), "", chubby.ErrorCode_INVALID_ARGUMENT},
		{"a space", ptr("bob smith"), "", chubby.ErrorCode_INVALID_ARGUMENT},
		{"star", ptr("*"), "", chubby.ErrorCode_INVALID_ARGUMENT},
		{"too long", ptr(strings.Repeat("b", 129)), "", chubby.ErrorCode_INVALID_ARGUMENT},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			res, _ := h.cmd(&fsm.Command{Principal: tt.principal, Op: opCreateSession("c")})
			if tt.code != 0 {
				if res.Err.GetCode() != tt.code || len(h.s.Sessions()) != 0 {
					t.Fatalf("got %v, sessions %v; want %v and none", res.Err, h.s.Sessions(), tt.code)
				}
				return
			}
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			if p, ok := h.s.SessionPrincipal(*res.Session); !ok || p != tt.want {
				t.Fatalf("SessionPrincipal = %q, %v; want %q", p, ok, tt.want)
			}
		})
	}
	h := newHarness(t)
	if p, ok := h.s.SessionPrincipal(1); ok || p != "" {
		t.Fatalf("SessionPrincipal of no session = %q, %v", p, ok)
	}
	a := h.session()
	for name, op := range map[string]*fsm.Op{
		"Tick":       opTick(),
		"Mkdir":      opMkdir(a, "/d", false, false),
		"EndSession": opEnd(a, false),
		"InitACL":    {InitAcl: &fsm.InitACL{Admin: "root"}},
	} {
		if res, _ := h.cmd(&fsm.Command{Principal: ptr("root"), Op: op}); res.Err.GetCode() != chubby.ErrorCode_INVALID_ARGUMENT {
			t.Errorf("%s with a principal: %v, want INVALID_ARGUMENT", name, res.Err)
		}
	}
	if !h.s.SessionExists(a) || h.exists("/d") {
		t.Fatal("a command with a principal was applied")
	}
}

// TestSessionPrincipalSnapshot: principals survive a snapshot; an
// anonymous session is encoded as before principals existed; Restore
// refuses a bad principal.
func TestSessionPrincipalSnapshot(t *testing.T) {
	h := newHarness(t)
	anon := h.session()
	bob := h.sessionAs("bob")
	snap := h.s.Snapshot()
	r, err := Restore(snap, DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := r.SessionPrincipal(anon); p != Anonymous {
		t.Fatalf("restored anonymous session acts as %q", p)
	}
	if p, _ := r.SessionPrincipal(bob); p != "bob" {
		t.Fatalf("restored session acts as %q, want bob", p)
	}
	sn, err := decodeSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	if sn.Sessions[0].Principal != nil || sn.Sessions[1].GetPrincipal() != "bob" {
		t.Fatalf("encoded principals %v / %v", sn.Sessions[0].Principal, sn.Sessions[1].Principal)
	}
	for _, bad := range []string{"", "bob smith", "*", strings.Repeat("p", 129)} {
		sn.Sessions[1].Principal = ptr(bad)
		if _, err := Restore(EncodeSnapshotForTest(sn), DefaultLimits()); err == nil {
			t.Errorf("restored a session with principal %q", bad)
		}
	}
	sn.Sessions[1].Principal = ptr(Anonymous)
	if r, err := Restore(EncodeSnapshotForTest(sn), DefaultLimits()); err != nil || r.sessions[bob].principal != Anonymous {
		t.Fatalf("an explicit anonymous principal: %v", err)
	}
}
