package fs

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/chubbygo/chubby/gen/fsm"
)

// TestSnapshotDeterminism applies random command streams and checks, every
// so often, that Snapshot → Restore → Snapshot gives identical bytes and
// that the original and the restored state then agree on every further
// command (results, effects, snapshots). A second state fed the same
// encoded log must end byte-identical.
func TestSnapshotDeterminism(t *testing.T) {
	seeds, steps := soak(10, 3000)
	for seed := int64(1); seed <= seeds; seed++ {
		g := newCmdGen(seed)
		a := New(DefaultLimits())
		replay := New(DefaultLimits())
		var restored *State
		for i := 0; i < steps; i++ {
			c := g.next()
			b := EncodeCommand(c)
			res, fx, err := a.ApplyBytes(b)
			if err != nil {
				t.Fatalf("seed %d step %d: decode: %v", seed, i, err)
			}
			g.observe(c, res, fx)
			res2, fx2, _ := replay.ApplyBytes(b)
			if !bytes.Equal(EncodeResult(res), EncodeResult(res2)) || !reflect.DeepEqual(fx, fx2) {
				t.Fatalf("seed %d step %d: replay diverged: %v / %v", seed, i, res, res2)
			}
			if restored != nil {
				res3, fx3 := restored.Apply(c)
				if !bytes.Equal(EncodeResult(res), EncodeResult(res3)) || !reflect.DeepEqual(fx, fx3) {
					t.Fatalf("seed %d step %d: restored state diverged:\n%v %+v\n%v %+v", seed, i, res, fx, res3, fx3)
				}
			}
			if i%100 == 99 {
				snap := a.Snapshot()
				if restored != nil && !bytes.Equal(snap, restored.Snapshot()) {
					t.Fatalf("seed %d step %d: restored state's snapshot differs", seed, i)
				}
				if !bytes.Equal(snap, replay.Snapshot()) {
					t.Fatalf("seed %d step %d: replayed state's snapshot differs", seed, i)
				}
				var err error
				restored, err = Restore(snap, DefaultLimits())
				if err != nil {
					t.Fatalf("seed %d step %d: restore: %v", seed, i, err)
				}
				if !bytes.Equal(snap, restored.Snapshot()) {
					t.Fatalf("seed %d step %d: snapshot → restore → snapshot differs", seed, i)
				}
				if a.Counts() != restored.Counts() || a.Now() != restored.Now() {
					t.Fatalf("seed %d step %d: counts %+v / %+v", seed, i, a.Counts(), restored.Counts())
				}
				at, ok := a.NextTimer()
				at2, ok2 := restored.NextTimer()
				if at != at2 || ok != ok2 {
					t.Fatalf("seed %d step %d: NextTimer differs", seed, i)
				}
			}
		}
	}
}

func TestSnapshotEmpty(t *testing.T) {
	s := New(DefaultLimits())
	snap := s.Snapshot()
	r, err := Restore(snap, DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snap, r.Snapshot()) {
		t.Fatal("empty snapshot not stable")
	}
	if _, err := Restore(snap, Limits{}); err == nil {
		t.Fatal("restore with invalid limits")
	}
}

// TestRestoreCorrupt flips, truncates and extends a real snapshot: Restore
// must fail or produce a state that passes every invariant, never panic.
func TestRestoreCorrupt(t *testing.T) {
	g := newCmdGen(7)
	s := New(DefaultLimits())
	for i := 0; i < 400; i++ {
		c := g.next()
		res, fx := s.Apply(c)
		g.observe(c, res, fx)
	}
	snap := s.Snapshot()
	try := func(b []byte) {
		t.Helper()
		r, err := Restore(b, DefaultLimits())
		if err != nil {
			return
		}
		if err := r.checkInvariants(); err != nil {
			t.Fatalf("restored a state with a broken invariant: %v", err)
		}
		// Accepted bytes must describe a state that snapshots stably.
		b2 := r.Snapshot()
		r2, err := Restore(b2, DefaultLimits())
		if err != nil || !bytes.Equal(b2, r2.Snapshot()) {
			t.Fatalf("accepted snapshot does not round-trip: %v", err)
		}
	}
	for i := 0; i < len(snap); i++ {
		for _, bit := range []byte{0x01, 0x80} {
			b := bytes.Clone(snap)
			b[i] ^= bit
			try(b)
		}
	}
	for _, n := range []int{0, 1, len(snap) / 2, len(snap) - 1} {
		if _, err := Restore(snap[:n], DefaultLimits()); err == nil {
			t.Fatalf("truncated snapshot (%d bytes) accepted", n)
		}
	}
	if _, err := Restore(append(bytes.Clone(snap), 0), DefaultLimits()); err == nil {
		t.Fatal("snapshot with a trailing byte accepted")
	}
	// Structural corruption that keeps the encoding valid.
	mutate := func(name string, f func(*fsm.Snapshot)) {
		t.Helper()
		sn, err := decodeSnapshot(snap)
		if err != nil {
			t.Fatal(err)
		}
		f(sn)
		b := EncodeSnapshotForTest(sn)
		if _, err := Restore(b, DefaultLimits()); err == nil {
			t.Errorf("%s: corrupt snapshot accepted", name)
		}
	}
	mutate("version", func(s *fsm.Snapshot) { s.Version = snapshotVersion + 1 })
	mutate("no nodes", func(s *fsm.Snapshot) { s.Nodes = nil })
	mutate("duplicate node", func(s *fsm.Snapshot) { s.Nodes = append(s.Nodes, s.Nodes[len(s.Nodes)-1]) })
	mutate("node counter", func(s *fsm.Snapshot) { s.NextInstance = 2 })
	mutate("handle counter", func(s *fsm.Snapshot) { s.NextHandle = 1 })
	mutate("session counter", func(s *fsm.Snapshot) { s.NextSession = 1 })
	mutate("time", func(s *fsm.Snapshot) { s.NowMs = -1 })
	mutate("checksum", func(s *fsm.Snapshot) {
		for _, n := range s.Nodes {
			if len(n.Content) > 0 {
				n.Content[0] ^= 1
				return
			}
		}
		s.Version = 0
	})
	mutate("root not first", func(s *fsm.Snapshot) { s.Nodes[0], s.Nodes[len(s.Nodes)-1] = s.Nodes[len(s.Nodes)-1], s.Nodes[0] })
	mutate("handle of unknown session", func(s *fsm.Snapshot) {
		if len(s.Handles) == 0 {
			s.Version = 0
			return
		}
		s.Handles[0].Session = 1 << 40
	})
}

// EncodeSnapshotForTest encodes a (possibly corrupted) snapshot struct.
func EncodeSnapshotForTest(s *fsm.Snapshot) []byte {
	b := make([]byte, s.BLength())
	s.FastWriteNocopy(b, nil)
	return b
}
