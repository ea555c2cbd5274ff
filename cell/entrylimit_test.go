package cell

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
	"github.com/chubbygo/chubby/replica/vr"
)

// worstPath is a valid path of MAX_PATH_BYTES.
func worstPath() string {
	comp := strings.Repeat("c", int(chubby.MAX_NAME_BYTES))
	var b strings.Builder
	for b.Len()+1+len(comp) <= int(chubby.MAX_PATH_BYTES) {
		b.WriteString("/" + comp)
	}
	if rest := int(chubby.MAX_PATH_BYTES) - b.Len() - 1; rest > 0 {
		b.WriteString("/" + strings.Repeat("c", rest))
	}
	return b.String()
}

// worstMulti is a Multi of every op and compare at its longest, with
// contents of n bytes together (in ops of at most MAX_CONTENT_BYTES).
func worstMulti(n int) *chubby.MultiRequest {
	p, yes, v := worstPath(), true, int64(-1)
	req := &chubby.MultiRequest{Session: -1, Rid: &chubby.RequestID{Seq: -1, Floor: -1}}
	for range chubby.MAX_MULTI_COMPARES {
		req.Compares = append(req.Compares, &chubby.Compare{Path: p, Kind: chubby.CompareKind_CONTENT_GENERATION, Value: &v})
	}
	for range chubby.MAX_MULTI_OPS {
		c := min(n, int(chubby.MAX_CONTENT_BYTES))
		n -= c
		req.Ops = append(req.Ops, &chubby.MultiOp{Kind: chubby.MultiOpKind_SET_CONTENTS, Path: p, Content: bytes.Repeat([]byte{'x'}, c),
			Directory: &yes, Ephemeral: &yes, Recursive: &yes, ExpectedGeneration: &v})
	}
	return req
}

// commandBytes is the encoding of op as the master proposes it, with every
// field of the command set.
func commandBytes(op *fsm.Op) int {
	s, seq, principal := chubby.SessionID(-1), int64(-1), strings.Repeat("p", int(chubby.MAX_PRINCIPAL_BYTES))
	return len(fs.EncodeCommand(&fsm.Command{TimeMs: -1, Session: &s, Seq: &seq, SeqFloor: &seq, Principal: &principal, Op: op}))
}

// TestEntryLimitChains encodes the worst case of every command a request
// becomes and checks it fits one log entry (vr.MaxEntryBytes): the limits
// the IDL documents chain to the log's.
func TestEntryLimitChains(t *testing.T) {
	p, yes, v := worstPath(), true, int64(-1)
	content := bytes.Repeat([]byte{'x'}, int(chubby.MAX_CONTENT_BYTES))
	hd := &chubby.Handle{Id: -1, Session: -1, Instance: -1, Path: p}
	rid := &chubby.RequestID{Seq: -1, Floor: -1}
	name := strings.Repeat("n", int(chubby.MAX_NAME_BYTES))
	mask := int32(-1)
	acks := make([]*fsm.EventAck, fs.MaxTrimAcks)
	for i := range acks {
		acks[i] = &fsm.EventAck{Session: -1, Acked: -1}
	}
	envelope := commandBytes(&fsm.Op{Multi: worstMulti(0)})
	if envelope > maxMultiEnvelopeBytes {
		t.Fatalf("a Multi's worst-case envelope is %d bytes, maxMultiEnvelopeBytes says %d", envelope, maxMultiEnvelopeBytes)
	}
	t.Logf("Multi envelope %d bytes (bound %d); contents up to %d of MAX_MULTI_BYTES %d with vr.MaxEntryBytes %d",
		envelope, maxMultiEnvelopeBytes, maxMultiContentBytes, chubby.MAX_MULTI_BYTES, vr.MaxEntryBytes)
	for _, c := range []struct {
		name string
		op   *fsm.Op
	}{
		{"CreateSession", &fsm.Op{CreateSession: &chubby.CreateSessionRequest{ClientName: strings.Repeat("c", int(chubby.MAX_CLIENT_NAME_BYTES)), Cache: &yes}}},
		{"EndSession", &fsm.Op{EndSession: &fsm.EndSession{Session: -1, Expired: true}}},
		{"Open", &fsm.Op{Open: &chubby.OpenRequest{Session: -1, Path: p, Mode: 1, Create: 1, Ephemeral: &yes, Sequential: &yes, InitialContent: content, EventMask: &mask, Rid: rid}}},
		{"Close", &fsm.Op{Close: &chubby.CloseRequest{Handle: hd, Rid: rid}}},
		{"SetContents", &fsm.Op{SetContents: &chubby.SetContentsRequest{Handle: hd, Content: content, ExpectedGeneration: &v, Rid: rid}}},
		{"Delete", &fsm.Op{DeleteNode: &chubby.DeleteRequest{Handle: hd, Recursive: &yes, Rid: rid}}},
		{"Mkdir", &fsm.Op{Mkdir: &chubby.MkdirRequest{Session: -1, Path: p, Parents: &yes, Ephemeral: &yes, Rid: rid}}},
		{"CreateFile", &fsm.Op{CreateFile: &chubby.CreateFileRequest{Session: -1, Path: p, Content: content, Ephemeral: &yes, Sequential: &yes, MakeParents: &yes, Rid: rid}}},
		{"Acquire", &fsm.Op{Acquire: &fsm.Acquire{Handle: hd, Mode: 1, Wait: true, LockDelayMs: -1}}},
		{"Release", &fsm.Op{Release: &chubby.HandleRequest{Handle: hd, Rid: rid, Cache: &yes}}},
		{"CancelWait", &fsm.Op{CancelWait: &fsm.CancelWait{Handle: hd}}},
		{"Tick", &fsm.Op{Tick: &fsm.Tick{}}},
		{"TrimEvents", &fsm.Op{TrimEvents: &fsm.TrimEvents{Acks: acks}}},
		{"SetACL", &fsm.Op{SetAcl: &chubby.SetACLRequest{Handle: hd, Acl: &chubby.ACLNames{ReadAcl: name, WriteAcl: name, ChangeAcl: name}, ExpectedAclGeneration: &v, Rid: rid}}},
		{"InitACL", &fsm.Op{InitAcl: &fsm.InitACL{Admin: strings.Repeat("a", int(chubby.MAX_PRINCIPAL_BYTES))}}},
		{"ReserveTimestamps", &fsm.Op{ReserveTimestamps: &fsm.ReserveTimestamps{Upto: -1}}},
		{"Multi", &fsm.Op{Multi: worstMulti(maxMultiContentBytes)}},
	} {
		if n := commandBytes(c.op); n > vr.MaxEntryBytes {
			t.Errorf("%s: worst case %d bytes, over vr.MaxEntryBytes %d", c.name, n, vr.MaxEntryBytes)
		} else {
			t.Logf("%-18s worst case %8d bytes", c.name, n)
		}
	}
}

// TestMultiAtItsBoundCommits walks a Multi's content bound through the
// real server: at it (in worst-case ops) the Multi commits; one byte past
// it is TOO_LARGE at once and changes nothing; four MAX_CONTENT_BYTES
// contents (the measured fault: INTERNAL, then a CloseSession held 20 s)
// are refused or commit, and the session's next calls are not held.
func TestMultiAtItsBoundCommits(t *testing.T) {
	tc := startCell(t, Config{})
	s := tc.session("multi")
	if _, err := tc.cli.Mkdir(ctx, &chubby.MkdirRequest{Session: s, Path: "/m"}); err != nil {
		t.Fatal(err)
	}
	ops := func(n int) []*chubby.MultiOp {
		var out []*chubby.MultiOp
		for i := 0; n > 0; i++ {
			c := min(n, int(chubby.MAX_CONTENT_BYTES))
			n -= c
			out = append(out, &chubby.MultiOp{Kind: chubby.MultiOpKind_CREATE, Path: "/m/f" + string(rune('a'+i)), Content: bytes.Repeat([]byte{'x'}, c)})
		}
		return out
	}
	if _, err := tc.cli.Multi(ctx, &chubby.MultiRequest{Session: s, Ops: ops(maxMultiContentBytes + 1)}); fs.Code(err) != chubby.ErrorCode_TOO_LARGE {
		t.Fatalf("Multi of %d bytes: %v, want TOO_LARGE", maxMultiContentBytes+1, err)
	}
	if r, err := tc.cli.Multi(ctx, &chubby.MultiRequest{Session: s, Ops: ops(maxMultiContentBytes)}); err != nil || !r.Succeeded {
		t.Fatalf("Multi of %d bytes (the bound): %+v, %v", maxMultiContentBytes, r, err)
	}
	// The worst-case envelope at the bound fits the log too (its
	// compares fail: nothing at the paths).
	worst := worstMulti(maxMultiContentBytes)
	worst.Session, worst.Rid = s, nil
	for _, op := range worst.Ops {
		op.Directory, op.Ephemeral, op.Recursive = nil, nil, nil // not of SET_CONTENTS
	}
	if r, err := tc.cli.Multi(ctx, worst); err != nil || r.Succeeded {
		t.Fatalf("worst-case Multi at the bound: %+v, %v; want an answer with a failed compare", r, err)
	}

	four := &chubby.MultiRequest{Session: s, Rid: &chubby.RequestID{Seq: 1, Floor: 1}}
	for i := range 4 {
		four.Ops = append(four.Ops, &chubby.MultiOp{Kind: chubby.MultiOpKind_CREATE, Path: "/m/four" + string(rune('a'+i)), Content: bytes.Repeat([]byte{'y'}, int(chubby.MAX_CONTENT_BYTES))})
	}
	_, err := tc.cli.Multi(ctx, four)
	if c := fs.Code(err); err != nil && c != chubby.ErrorCode_TOO_LARGE {
		t.Fatalf("Multi of four full files: %v, want success or TOO_LARGE", err)
	}
	start := time.Now()
	if err := tc.cli.CloseSession(ctx, &chubby.CloseSessionRequest{Session: s}); err != nil {
		t.Fatal(err)
	}
	if d, hold := time.Since(start), tc.s.changes.cfg.UncertainHold; d >= hold {
		t.Fatalf("CloseSession after the refused Multi took %v: held for the refused proposal (UncertainHold %v)", d, hold)
	}
}

// TestRefusedProposalHoldsNothing: a command the log refuses for its size
// (here one that bypasses the edge checks) is TOO_LARGE, and its session's
// CloseSession is not held behind it (it was held UncertainHold, 20 s).
func TestRefusedProposalHoldsNothing(t *testing.T) {
	tc := startCell(t, Config{})
	s := tc.session("refused")
	h := tc.open(s, "/f", chubby.CreateMode_OPEN_OR_CREATE, false)
	big := &fsm.Op{SetContents: &chubby.SetContentsRequest{Handle: h, Content: make([]byte, vr.MaxEntryBytes)}}
	_, err := tc.s.submit(ctx, proposal{op: big, session: s, rid: &chubby.RequestID{Seq: 1, Floor: 1}})
	if fs.Code(err) != chubby.ErrorCode_TOO_LARGE {
		t.Errorf("a command over the entry limit: %v, want TOO_LARGE", err)
	}
	start := time.Now()
	if err := tc.cli.CloseSession(ctx, &chubby.CloseSessionRequest{Session: s}); err != nil {
		t.Fatal(err)
	}
	if d, hold := time.Since(start), tc.s.changes.cfg.UncertainHold; d >= hold {
		t.Fatalf("CloseSession took %v after the refused command (UncertainHold %v)", d, hold)
	}
}
