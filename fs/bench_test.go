package fs

import (
	"fmt"
	"testing"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// benchState returns a state with one session and n files, each with an
// open READ_WRITE handle.
func benchState(b *testing.B, n int) (*State, chubby.SessionID, []*chubby.Handle) {
	s := New(DefaultLimits())
	now := int64(1)
	do := func(op *fsm.Op) *fsm.Result_ {
		now++
		res, _ := s.Apply(&fsm.Command{TimeMs: now, Op: op})
		if res.Err != nil {
			b.Fatal(res.Err)
		}
		return res
	}
	sess := *do(opCreateSession("bench")).Session
	do(opMkdir(sess, "/bench", false, false))
	hs := make([]*chubby.Handle, n)
	for i := range hs {
		hs[i] = do(opOpen(&chubby.OpenRequest{Session: sess, Path: fmt.Sprintf("/bench/f%d", i), Mode: rdwr, Create: chubby.CreateMode_CREATE_NEW})).Handle
	}
	return s, sess, hs
}

func reportOps(b *testing.B, opsPerIter int) {
	b.ReportMetric(float64(b.N*opsPerIter)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkApply measures commands applied per second by the state machine
// alone (no log, no RPC).
func BenchmarkApply(b *testing.B) {
	content := make([]byte, 64)
	b.Run("SetContents64B", func(b *testing.B) {
		s, _, hs := benchState(b, 1000)
		cmds := make([]*fsm.Command, len(hs))
		for i, h := range hs {
			cmds[i] = &fsm.Command{Op: &fsm.Op{SetContents: &chubby.SetContentsRequest{Handle: h, Content: content}}}
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			c := cmds[i%len(cmds)]
			c.TimeMs = int64(i)
			if res, _ := s.Apply(c); res.Err != nil {
				b.Fatal(res.Err)
			}
		}
		reportOps(b, 1)
	})
	// Events: a file watched by n sessions (one handle each, queues
	// trimmed as clients would), so each write queues n events.
	for _, watchers := range []int{1, 100} {
		b.Run(fmt.Sprintf("SetContents64B-%dWatchers", watchers), func(b *testing.B) {
			s, _, hs := benchState(b, 1)
			mask := int32(chubby.EVENT_MASK_FILE_CONTENTS_MODIFIED)
			var sessions []chubby.SessionID
			for range watchers {
				res, _ := s.Apply(&fsm.Command{TimeMs: 1, Op: opCreateSession("w")})
				sessions = append(sessions, *res.Session)
				s.Apply(&fsm.Command{TimeMs: 1, Op: opOpen(&chubby.OpenRequest{Session: *res.Session, Path: hs[0].Path,
					Mode: rd, Create: chubby.CreateMode_OPEN_EXISTING, EventMask: &mask})})
			}
			c := &fsm.Command{Op: &fsm.Op{SetContents: &chubby.SetContentsRequest{Handle: hs[0], Content: content}}}
			trim := &fsm.TrimEvents{}
			for _, id := range sessions {
				trim.Acks = append(trim.Acks, &fsm.EventAck{Session: id})
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c.TimeMs = int64(i)
				if res, _ := s.Apply(c); res.Err != nil {
					b.Fatal(res.Err)
				}
				if i%500 == 499 { // acks come in batches
					for _, a := range trim.Acks {
						a.Acked = int64(i + 1)
					}
					s.Apply(&fsm.Command{TimeMs: int64(i), Op: &fsm.Op{TrimEvents: trim}})
				}
			}
			reportOps(b, 1)
			b.ReportMetric(float64(b.N*watchers)/b.Elapsed().Seconds(), "events/s")
		})
	}
	// Exactly-once: one request in flight (floor = seq: one saved answer),
	// and 64 in flight (the floor 63 behind: 64 saved answers).
	for _, inFlight := range []int64{1, 64} {
		name := "SetContents64B-ApplyBytes-ExactlyOnce"
		if inFlight > 1 {
			name += fmt.Sprintf("-%dInFlight", inFlight)
		}
		b.Run(name, func(b *testing.B) {
			s, sess, hs := benchState(b, 1000)
			encoded := make([][]byte, b.N)
			for i := range encoded {
				seq := int64(i + 1)
				floor := max(1, seq-inFlight+1)
				encoded[i] = EncodeCommand(&fsm.Command{TimeMs: int64(i), Session: &sess, Seq: &seq, SeqFloor: &floor,
					Op: &fsm.Op{SetContents: &chubby.SetContentsRequest{Handle: hs[i%len(hs)], Content: content}}})
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if res, _, err := s.ApplyBytes(encoded[i]); err != nil || res.Err != nil {
					b.Fatal(err, res.Err)
				}
			}
			reportOps(b, 1)
		})
	}
	b.Run("AcquireRelease", func(b *testing.B) {
		s, _, hs := benchState(b, 1000)
		acq := make([]*fsm.Command, len(hs))
		rel := make([]*fsm.Command, len(hs))
		for i, h := range hs {
			acq[i] = &fsm.Command{Op: opAcquire(h, excl, false, 15000)}
			rel[i] = &fsm.Command{Op: opRelease(h)}
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			j := i % len(hs)
			acq[j].TimeMs = int64(i)
			rel[j].TimeMs = int64(i)
			if res, _ := s.Apply(acq[j]); res.Err != nil {
				b.Fatal(res.Err)
			}
			if res, _ := s.Apply(rel[j]); res.Err != nil {
				b.Fatal(res.Err)
			}
		}
		reportOps(b, 2)
	})
	b.Run("AcquireReleaseContended", func(b *testing.B) {
		// Two handles on one file take turns: every release wakes the other.
		s, sess, _ := benchState(b, 0)
		var hs [2]*chubby.Handle
		for i := range hs {
			res, _ := s.Apply(&fsm.Command{TimeMs: 1, Op: opOpen(&chubby.OpenRequest{Session: sess, Path: "/l", Mode: rd, Create: chubby.CreateMode_OPEN_OR_CREATE})})
			hs[i] = res.Handle
		}
		s.Apply(&fsm.Command{TimeMs: 1, Op: opAcquire(hs[0], excl, false, 0)})
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			holder, next := hs[i%2], hs[(i+1)%2]
			if res, _ := s.Apply(&fsm.Command{TimeMs: int64(i), Op: opAcquire(next, excl, true, 0)}); !res.GetWaiting() {
				b.Fatal("not queued", res.Err)
			}
			if _, fx := s.Apply(&fsm.Command{TimeMs: int64(i), Op: opRelease(holder)}); len(fx.Woken) != 1 {
				b.Fatal("no wake")
			}
		}
		reportOps(b, 2)
	})
	b.Run("OpenClose", func(b *testing.B) {
		s, sess, _ := benchState(b, 1000)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			res, _ := s.Apply(&fsm.Command{TimeMs: int64(i), Op: opOpen(&chubby.OpenRequest{Session: sess, Path: "/bench/f7", Mode: rd, Create: chubby.CreateMode_OPEN_EXISTING})})
			if res.Err != nil {
				b.Fatal(res.Err)
			}
			if res, _ := s.Apply(&fsm.Command{TimeMs: int64(i), Op: opClose(res.Handle)}); res.Err != nil {
				b.Fatal(res.Err)
			}
		}
		reportOps(b, 2)
	})
}

// BenchmarkSnapshot measures Snapshot and Restore of a state with 100,000
// files of 64 bytes.
func BenchmarkSnapshot(b *testing.B) {
	s, sess, _ := benchState(b, 0)
	for i := 0; i < 100_000; i++ {
		res, _ := s.Apply(&fsm.Command{TimeMs: 2, Op: opCreateFile(&chubby.CreateFileRequest{Session: sess, Path: fmt.Sprintf("/d%d/f%d", i%100, i), Content: make([]byte, 64), MakeParents: ptr(true)})})
		if res.Err != nil {
			b.Fatal(res.Err)
		}
	}
	snap := s.Snapshot()
	b.Run("Snapshot", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			s.Snapshot()
		}
		b.ReportMetric(float64(len(snap)), "bytes")
	})
	b.Run("Restore", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := Restore(snap, DefaultLimits()); err != nil {
				b.Fatal(err)
			}
		}
	})
}
