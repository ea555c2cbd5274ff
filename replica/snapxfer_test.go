package replica

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/chubbygo/chubby/replica/vr"
)

// A snapshot transfer cut at random points — chunks and acknowledgements
// lost, the receiver restarted mid-way — resumes where the receiver's disk
// stands: every chunk is stored once, and the replica catches up.
func TestSnapshotTransferResumes(t *testing.T) {
	midway := 0 // receivers restarted with part of the snapshot staged
	defer func() {
		if midway == 0 {
			t.Error("no receiver was restarted in the middle of a transfer")
		}
	}()
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			c := newClusterSnap(t, 3, 20, nil)
			c.run(100 * time.Millisecond)
			c.crash(3)
			for i := range 60 {
				c.propose(fmt.Sprintf("entry-%02d-of-the-state-to-ship", i)) // ~2 KiB: ~260 chunks
			}
			c.run(100 * time.Millisecond)
			loss := 0.02 + rng.Float64()*0.2
			c.drop = func(m vr.Message) bool {
				return (m.Type == vr.MsgSnapshotChunk || m.Type == vr.MsgSnapshotChunkOK) && rng.Float64() < loss
			}
			c.perStep = 3
			c.start(c.nodes[3])
			stored := uint64(0)
			for range 2 + rng.IntN(3) {
				c.run(time.Duration(5+rng.IntN(400)) * time.Millisecond)
				if c.nodes[3].n().Info().SnapshotIndex > 0 {
					break
				}
				stored += c.nodes[3].d.TransferStats().ChunksStored
				if _, n, _ := c.nodes[3].disk.Staged(); n > 0 {
					midway++
				}
				c.crash(3)
				c.run(time.Duration(rng.IntN(20)) * time.Millisecond)
				c.start(c.nodes[3])
			}
			// A stall (the last chunk or acknowledgement of a window
			// lost) costs a resend interval, 1 s.
			c.run(120 * time.Second)
			c.drop, c.perStep = nil, 0
			c.run(100 * time.Millisecond)
			got := c.nodes[3].n().Info()
			if got.Applied != 61 || got.Status != vr.StatusNormal {
				t.Fatalf("replica 3 after catch-up: %+v", got)
			}
			c.checkAgree()
			stored += c.nodes[3].d.TransferStats().ChunksStored
			_, info, err := c.nodes[1].disk.ReadSnapshotChunk(c.nodes[1].disk.snap.Index, 0)
			if err != nil {
				t.Fatal(err)
			}
			if stored != uint64(info.Chunks) && c.nodes[1].disk.snap.Index == got.SnapshotIndex {
				t.Fatalf("%d chunks stored for a snapshot of %d: the transfer did not resume", stored, info.Chunks)
			}
		})
	}
}

// The size limits along the way from a command to a peer's disk fit one
// inside the other.
func TestLimitsAreConsistent(t *testing.T) {
	chain := []struct {
		what         string
		inner, outer int64
	}{
		{"a stored snapshot chunk within what a receiver accepts", SnapshotChunkBytes, MaxSnapshotChunkBytes},
		{"a snapshot chunk within a Deliver batch", MaxSnapshotChunkBytes + 4096, maxDeliverBytes},
		{"a Prepare within a Deliver batch", vr.MaxMessageBytes + 64*vr.MaxMessageEntries, maxDeliverBytes},
		{"a log entry within a Prepare", vr.MaxEntryBytes, vr.MaxMessageBytes},
		{"a stored log entry within the protocol's entry", MaxEntryBytes, vr.MaxEntryBytes},
		{"a Deliver batch and one more message within the server's payload bound", maxDeliverBytes + vr.MaxMessageBytes + 64*vr.MaxMessageEntries, MaxPeerPayloadBytes},
		{"the largest default Prepare within a Deliver batch", int64(vr.DefaultConfig().MaxPrepareBytes) + 64*vr.MaxMessageEntries, maxDeliverBytes},
		{"the answers riding back within the payload bound", maxReplyBytes + vr.MaxMessageBytes, MaxPeerPayloadBytes},
		{"a chunk count of a largest snapshot within 32 bits", MaxSnapshotBytes / SnapshotChunkBytes, 1<<32 - 1},
	}
	for _, c := range chain {
		if c.inner > c.outer {
			t.Errorf("%s: %d > %d", c.what, c.inner, c.outer)
		}
	}
}

// Chunk messages a peer may send wrongly are dropped by the driver and
// change nothing: nothing is staged and no acknowledgement claims progress.
func TestHostileChunksChangeNothing(t *testing.T) {
	members := vr.Members{{ID: 1, ClientAddr: "r1"}, {ID: 2, ClientAddr: "r2"}, {ID: 3, ClientAddr: "r3"}}
	meta := &vr.SnapshotMeta{Index: 50, View: 0, Members: members}
	good := vr.SnapshotChunk{N: 0, Chunks: 2, Length: 10, Sum: 1}
	chunk := func(f func(m *vr.Message)) vr.Message {
		c := good
		s := *meta
		m := vr.Message{Type: vr.MsgSnapshotChunk, From: 1, To: 3, Snapshot: &s, Chunk: &c, SnapshotData: []byte("01234")}
		f(&m)
		return m
	}
	cases := []struct {
		name string
		m    vr.Message
	}{
		{"no metadata", chunk(func(m *vr.Message) { m.Snapshot = nil })},
		{"no chunk fields", chunk(func(m *vr.Message) { m.Chunk = nil })},
		{"addressed elsewhere", chunk(func(m *vr.Message) { m.To = 2 })},
		{"from itself", chunk(func(m *vr.Message) { m.From = 3 })},
		{"index 0", chunk(func(m *vr.Message) { m.Snapshot.Index = 0 })},
		{"snapshot view after the message's", chunk(func(m *vr.Message) { m.Snapshot.View = 5 })},
		{"bad configuration", chunk(func(m *vr.Message) { m.Snapshot.Members = nil })},
		{"no chunks", chunk(func(m *vr.Message) { m.Chunk.Chunks = 0 })},
		{"chunk past the end", chunk(func(m *vr.Message) { m.Chunk.N = 2 })},
		{"more chunks than bytes", chunk(func(m *vr.Message) { m.Chunk.Chunks = 20 })},
		{"length over the bound", chunk(func(m *vr.Message) { m.Chunk.Length = MaxSnapshotBytes + 1 })},
		{"length beyond what the chunks can hold", chunk(func(m *vr.Message) { m.Chunk.Length = 3 * MaxSnapshotChunkBytes })},
		{"chunk over the size bound", chunk(func(m *vr.Message) { m.SnapshotData = make([]byte, MaxSnapshotChunkBytes+1) })},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if validChunk(&c.m, 3) {
				t.Fatal("accepted")
			}
			cl := newCluster(t, 3, nil)
			cl.run(50 * time.Millisecond)
			before := cl.nodes[3].n().Info()
			cl.queue = nil
			cl.nodes[3].d.Step([]vr.Message{c.m})
			if _, n, _ := cl.nodes[3].disk.Staged(); n != 0 {
				t.Fatalf("%d chunks staged", n)
			}
			for _, m := range cl.queue {
				if m.Type == vr.MsgSnapshotChunkOK {
					t.Fatalf("answered %v", m.String())
				}
			}
			if after := cl.nodes[3].n().Info(); after.Commit != before.Commit || after.SnapshotIndex != before.SnapshotIndex {
				t.Fatalf("state changed: %+v → %+v", before, after)
			}
		})
	}
	// The well-formed one is taken: staged and acknowledged.
	if m := chunk(func(*vr.Message) {}); !validChunk(&m, 3) {
		t.Fatal("a well-formed chunk is refused")
	}
}
