package fs

import (
	"bytes"
	"testing"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// fuzzBase builds a small state with something of everything: sessions,
// directories, files, ephemeral nodes, handles, held and contended locks, a
// pending lock-delay. It returns the state and handles to aim commands at.
func fuzzBase() (*State, []*chubby.Handle) {
	s := New(DefaultLimits())
	now := int64(1000)
	do := func(op *fsm.Op) *fsm.Result_ {
		now += 10
		res, _ := s.Apply(&fsm.Command{TimeMs: now, Op: op})
		if res.Err != nil {
			panic(res.Err)
		}
		return res
	}
	s1 := *do(opCreateSession("one")).Session
	s2 := *do(opCreateSession("two")).Session
	s3 := *do(opCreateSession("three")).Session
	do(opMkdir(s1, "/d/e", true, false))
	do(opMkdir(s2, "/eph", false, true))
	do(opCreateFile(&chubby.CreateFileRequest{Session: s1, Path: "/d/f", Content: []byte("content")}))
	do(opCreateFile(&chubby.CreateFileRequest{Session: s2, Path: "/eph/x", Ephemeral: ptr(true), Sequential: ptr(true)}))
	open := func(sess chubby.SessionID, path string, mode chubby.OpenMode) *chubby.Handle {
		return do(opOpen(&chubby.OpenRequest{Session: sess, Path: path, Mode: mode, Create: chubby.CreateMode_OPEN_OR_CREATE})).Handle
	}
	hs := []*chubby.Handle{
		open(s1, "/d/f", rdwr), open(s2, "/d/f", rd), open(s3, "/d/f", rd),
		open(s1, "/d", rdwr), open(s2, "/eph/x0000000000", rdwr), open(s3, "/l", rd),
		open(s1, "/", rd),
	}
	do(opAcquire(hs[0], excl, false, 1000))
	do(opAcquire(hs[1], shared, true, 0))
	do(opAcquire(hs[2], shared, true, 0))
	do(opAcquire(hs[5], excl, false, 5000))
	s4 := *do(opCreateSession("four")).Session
	hs = append(hs, open(s4, "/m", rd), open(s3, "/m", rd))
	do(opAcquire(hs[7], excl, false, 30000))
	do(opAcquire(hs[8], excl, true, 0))
	do(opEnd(s4, true)) // /m in lock-delay with a waiter
	// Exactly-once records: s1 has requests 2, 4 and 5 answered above its
	// floor 2 (3 still in flight), s3 has 1.
	sdo := func(sess chubby.SessionID, seq, floor int64, op *fsm.Op) {
		now += 10
		if res, _ := s.Apply(&fsm.Command{TimeMs: now, Session: &sess, Seq: &seq, SeqFloor: &floor, Op: op}); res.Err != nil {
			panic(res.Err)
		}
	}
	sdo(s1, 1, 1, opMkdir(s1, "/s", false, false))
	sdo(s1, 2, 1, opCreateFile(&chubby.CreateFileRequest{Session: s1, Path: "/s/n", Sequential: ptr(true)}))
	sdo(s1, 4, 1, opSet(hs[0], "four"))
	sdo(s1, 5, 2, opAcquire(hs[6], excl, false, 0))
	sdo(s3, 1, 1, opOpen(&chubby.OpenRequest{Session: s3, Path: "/s/w", Mode: rd, Create: chubby.CreateMode_OPEN_OR_CREATE}))
	// ACLs: anonymous is the admin, alice's team may read /d/e.
	now += 10
	res, _ := s.Apply(&fsm.Command{TimeMs: now, Principal: ptr("alice"), Op: opCreateSession("five")})
	s5 := *res.Session
	hs = append(hs, open(s5, "/d/f", rd), open(s1, "/d/e", rd))
	do(opInitACL(Anonymous))
	do(opCreateFile(&chubby.CreateFileRequest{Session: s1, Path: "/acl/team", Content: []byte("alice\n*\n")}))
	do(opSetACL(hs[10], aclNamesOf("team", "", "admin")))
	return s, hs
}

func fuzzSeeds(hs []*chubby.Handle) [][]byte {
	t := int64(2000)
	cmd := func(op *fsm.Op) []byte { t += 100; return EncodeCommand(&fsm.Command{TimeMs: t, Op: op}) }
	s1, s2 := hs[0].Session, hs[1].Session
	seeds := [][]byte{
		cmd(opCreateSession("x")),
		cmd(opEnd(s1, true)),
		cmd(opEnd(s2, false)),
		cmd(opOpen(&chubby.OpenRequest{Session: s1, Path: "/d/e/new", Mode: rdwr, Create: chubby.CreateMode_CREATE_NEW, Ephemeral: ptr(true), Sequential: ptr(true), InitialContent: []byte("x")})),
		cmd(opClose(hs[0])),
		cmd(opSet(hs[0], "new content")),
		cmd(opSetGen(hs[0], "cas", 1)),
		cmd(opDelete(hs[3], true)),
		cmd(opMkdir(s1, "/m/n", true, true)),
		cmd(opCreateFile(&chubby.CreateFileRequest{Session: s2, Path: "/p/q", MakeParents: ptr(true), Content: []byte("c")})),
		cmd(opAcquire(hs[6], shared, true, 100)),
		cmd(opRelease(hs[0])),
		cmd(opCancel(hs[1])),
		cmd(opTick()),
		EncodeCommand(&fsm.Command{TimeMs: 100_000, Op: opTick()}),
		EncodeCommand(&fsm.Command{TimeMs: 3000, Session: &s1, Seq: ptr(int64(1)), Op: opSet(hs[0], "once")}),
		EncodeCommand(&fsm.Command{TimeMs: 3000, Session: &s1, Seq: ptr(int64(2)), SeqFloor: ptr(int64(2)), Op: opCreateFile(&chubby.CreateFileRequest{Session: s1, Path: "/s/n", Sequential: ptr(true)})}),
		EncodeCommand(&fsm.Command{TimeMs: 3000, Session: &s1, Seq: ptr(int64(3)), SeqFloor: ptr(int64(2)), Op: opSet(hs[0], "three")}),
		EncodeCommand(&fsm.Command{TimeMs: 3000, Session: &s1, Seq: ptr(int64(6)), SeqFloor: ptr(int64(5)), Op: opSet(hs[0], "six")}),
		EncodeCommand(&fsm.Command{TimeMs: 3000, Session: &s1, Seq: ptr(int64(3)), SeqFloor: ptr(int64(4)), Op: opSet(hs[0], "bad floor")}),
		cmd(opSetACL(hs[0], aclNamesOf("team", "admin", ""))),
		cmd(opSetACLGen(hs[10], aclNamesOf("", "", ""), 1)),
		cmd(opSetACL(hs[9], aclNamesOf("", "", ""))),
		cmd(opInitACL("root")),
		cmd(opCreateFile(&chubby.CreateFileRequest{Session: s1, Path: "/acl/team", Content: []byte("bob smith")})),
		cmd(opOpen(&chubby.OpenRequest{Session: hs[9].Session, Path: "/d/e/g", Mode: rdwr, Create: chubby.CreateMode_CREATE_NEW})),
		EncodeCommand(&fsm.Command{TimeMs: 3000, Principal: ptr("alice"), Op: opCreateSession("x")}),
		EncodeCommand(&fsm.Command{TimeMs: 3000, Principal: ptr("alice"), Op: opTick()}),
		EncodeCommand(&fsm.Command{TimeMs: 3000, Session: &s1, Seq: ptr(int64(7)), SeqFloor: ptr(int64(5)), Op: opSetACL(hs[0], aclNamesOf("a", "b", "c"))}),
		cmd(opMulti(s1, compares(mExists("/d/f"), mGenIs("/d/f", 2)), mCreate("/d/e/m", "x"), mSet("/d/f", "y"), mDelete("/eph/x0000000000"))),
		cmd(opMulti(s2, nil, mMkdir("/n"), mCreateEph("/n/f"), mSet("/n/f", "z"), mDeleteAll("/d"))),
		cmd(opMulti(s1, compares(mNotExists("/d")), mCreate("/zz", ""))),
		cmd(opMulti(s1, compares(mInstanceIs("/d/f", 5)), mDelete("/d/f"), mCreate("/d/f", "again"))),
		cmd(opMulti(s1, nil, mCreate("/q", ""), mDelete("/m"), mCreate("/q", ""))),
		cmd(opMulti(s1, nil, mCreate("/acl/new", "alice\n"), mSet("/acl/team", "bob\n"))),
		cmd(opMulti(s1, nil)),
		EncodeCommand(&fsm.Command{TimeMs: 3000, Session: &s1, Seq: ptr(int64(8)), SeqFloor: ptr(int64(5)), Op: opMulti(s1, nil, mCreate("/s/m", ""))}),
		{},
		{0},
		{0x88, 0, 1, 0},
	}
	g := newCmdGen(99)
	for i := 0; i < 30; i++ {
		seeds = append(seeds, EncodeCommand(g.next()))
	}
	return seeds
}

// FuzzApplyBytes feeds arbitrary bytes to ApplyBytes on a populated state:
// it must never panic; a decode error must change nothing; an applied
// command must leave every invariant intact and a state that snapshots and
// restores to the same bytes.
func FuzzApplyBytes(f *testing.F) {
	base, hs := fuzzBase()
	baseSnap := base.Snapshot()
	for _, seed := range fuzzSeeds(hs) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Restore(baseSnap, DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		res, fx, err := s.ApplyBytes(b)
		if err != nil {
			if res != nil || len(fx.Woken) > 0 || !bytes.Equal(s.Snapshot(), baseSnap) {
				t.Fatalf("failed decode changed something: %v", err)
			}
			return
		}
		if res == nil {
			t.Fatal("nil result")
		}
		if res.Err != nil && res.Err.Code == chubby.ErrorCode_INTERNAL {
			t.Fatalf("internal error: %v", res.Err)
		}
		for _, w := range fx.Woken {
			if (w.Sequencer == nil) == (w.Err == nil) {
				t.Fatalf("wake %+v", w)
			}
		}
		if err := s.checkInvariants(); err != nil {
			t.Fatalf("invariant: %v", err)
		}
		snap := s.Snapshot()
		r, err := Restore(snap, DefaultLimits())
		if err != nil {
			t.Fatalf("restore after apply: %v", err)
		}
		if !bytes.Equal(snap, r.Snapshot()) {
			t.Fatal("snapshot not stable")
		}
		// Decoding is deterministic: the same bytes applied to another copy
		// give the same result.
		s2, _ := Restore(baseSnap, DefaultLimits())
		res2, _, _ := s2.ApplyBytes(b)
		if !bytes.Equal(EncodeResult(res), EncodeResult(res2)) || !bytes.Equal(snap, s2.Snapshot()) {
			t.Fatal("same command, different outcome")
		}
	})
}

// FuzzRestore feeds arbitrary bytes to Restore: never a panic; an accepted
// snapshot passes every invariant and snapshots stably.
func FuzzRestore(f *testing.F) {
	base, _ := fuzzBase()
	f.Add(base.Snapshot())
	f.Add(New(DefaultLimits()).Snapshot())
	g := newCmdGen(5)
	s := New(DefaultLimits())
	for i := 0; i < 300; i++ {
		c := g.next()
		res, fx := s.Apply(c)
		g.observe(c, res, fx)
	}
	f.Add(s.Snapshot())
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Restore(b, DefaultLimits())
		if err != nil {
			return
		}
		if err := r.checkInvariants(); err != nil {
			t.Fatalf("accepted a snapshot with a broken invariant: %v", err)
		}
		b2 := r.Snapshot()
		r2, err := Restore(b2, DefaultLimits())
		if err != nil || !bytes.Equal(b2, r2.Snapshot()) {
			t.Fatalf("accepted snapshot does not round-trip: %v", err)
		}
	})
}

// TestDecodeCommand covers the codec edges the fuzzer starts from.
func TestDecodeCommand(t *testing.T) {
	c := &fsm.Command{TimeMs: 5, Op: opTick()}
	b := EncodeCommand(c)
	d, err := DecodeCommand(b)
	if err != nil || d.TimeMs != 5 || d.Op.Tick == nil {
		t.Fatalf("round trip: %v %v", d, err)
	}
	for name, bad := range map[string][]byte{
		"empty":         nil,
		"trailing":      append(bytes.Clone(b), 0),
		"truncated":     b[:len(b)-1],
		"bad type":      {0x88, 0, 1, 0},
		"no time":       EncodeCommand(&fsm.Command{Op: opTick()})[9:],
		"huge string":   {11, 0, 9, 0x7f, 0xff, 0xff, 0xff},
		"negative list": {15, 0, 9, 12, 0xff, 0xff, 0xff, 0xff, 0},
	} {
		if _, err := DecodeCommand(bad); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	s := New(DefaultLimits())
	before := s.Snapshot()
	if _, _, err := s.ApplyBytes([]byte{1, 2, 3}); err == nil || !bytes.Equal(before, s.Snapshot()) {
		t.Fatal("garbage applied")
	}
	r := &fsm.Result_{Err: Errorf(chubby.ErrorCode_NOT_FOUND, "x")}
	if r2, err := DecodeResult(EncodeResult(r)); err != nil || r2.Err.Code != chubby.ErrorCode_NOT_FOUND {
		t.Fatalf("result round trip: %v %v", r2, err)
	}
}
