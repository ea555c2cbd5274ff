package vr

import (
	"encoding/binary"
	"testing"
	"time"
)

// byteReader hands out small numbers from fuzz input; zeros when it runs
// out.
type byteReader struct{ b []byte }

func (r *byteReader) u8() uint8 {
	if len(r.b) == 0 {
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *byteReader) small() uint64 { return uint64(r.u8() % 16) }

func (r *byteReader) u64() uint64 {
	if len(r.b) < 8 {
		return r.small()
	}
	v := binary.BigEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *byteReader) num() uint64 {
	if r.u8()%8 == 0 {
		return r.u64() // sometimes huge
	}
	return r.small()
}

func (r *byteReader) message(to uint64) Message {
	m := Message{
		Type: MsgType(r.u8() % 13), From: r.small() % 5, To: to, View: r.num(),
		Op: r.num(), OpView: r.num(), Commit: r.num(), PrevOp: r.num(), PrevView: r.num(),
		LastNormalView: r.num(), StartOp: r.num(), Stamp: r.num(),
		Normal: r.u8()%2 == 0, Reject: r.u8()%2 == 0, Granted: r.u8()%2 == 0, Final: r.u8()%2 == 0,
	}
	if m.From == to && r.u8()%4 != 0 {
		m.From = to%3 + 1
	}
	for range r.small() % 6 {
		e := Entry{Index: r.num(), View: r.num(), Type: EntryType(r.u8() % 3), Data: []byte{r.u8()}}
		if r.u8()%2 == 0 && len(m.Entries) > 0 {
			p := m.Entries[len(m.Entries)-1]
			e.Index, e.View = p.Index+1, p.View+r.small()%2
		} else if len(m.Entries) == 0 && r.u8()%2 == 0 {
			e.Index, e.View = m.PrevOp+1, m.PrevView
		}
		if e.Type == EntryConfig {
			e.Data = EncodeMembers(Members{{ID: 1}, {ID: 2}, {ID: 3}})
		}
		m.Entries = append(m.Entries, e)
	}
	for range r.small() % 4 {
		m.Runs = append(m.Runs, Run{View: r.num(), Last: r.num()})
	}
	if r.u8()%3 == 0 {
		m.Snapshot = &SnapshotMeta{Index: r.num(), View: r.num(), Members: Members{{ID: 1}, {ID: 2}, {ID: 3}}}
		m.SnapshotData = []byte("snap")
	}
	return m
}

// FuzzStep feeds a replica arbitrary messages, ticks and proposals, and
// carries out its Ready: whatever a peer sends, the node must not panic.
// (A peer that lies can make the replica wrong — the fault model has no
// Byzantine replicas — but never make it crash.)
func FuzzStep(f *testing.F) {
	f.Add([]byte{1, 1, 1, 0, 2, 3, 4})
	f.Add([]byte{8, 1, 2, 3, 3, 0, 0, 0, 1, 1, 1, 5, 2})
	f.Add([]byte{6, 2, 1, 5, 5, 5, 5, 5, 5, 5, 5, 5, 7, 3, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &byteReader{b: data}
		id := 1 + uint64(r.u8()%3)
		members := Members{{ID: 1}, {ID: 2}, {ID: 3}}
		now := int64(1_000_000_000)
		n, err := NewNode(Config{ID: id, InitialMembers: members}, Persisted{}, now)
		if err != nil {
			t.Fatal(err)
		}
		for steps := 0; len(r.b) > 0 && steps < 200; steps++ {
			switch r.u8() % 5 {
			case 0:
				now += int64(r.small()) * int64(20*time.Millisecond)
				n.Tick(now)
			case 1:
				_, _ = n.Propose([]byte{r.u8()})
			default:
				_ = n.Step(r.message(id))
			}
			for n.HasReady() {
				rd := n.Ready()
				view := n.Info().View
				n.Advance()
				if rd.PersistAsync && rd.Last() > 0 && r.u8()%2 == 0 {
					n.Persisted(rd.Last(), view)
				}
				if len(rd.Committed) > 0 && r.u8()%4 == 0 {
					a := n.Info().Applied
					if meta, err := n.SnapshotMeta(a); err == nil {
						_ = n.Compact(meta)
					}
				}
			}
		}
	})
}
