package replica

// Snapshot transfer.
//
// The core decides when a replica needs a snapshot (its missing entries
// were compacted away) and says so with a MsgSnapshot that carries only
// the snapshot's metadata. The bytes travel between the drivers, chunk by
// chunk, as the sender's disk stores them (Disk.ReadSnapshotChunk):
//
//   - The sender keeps at most DriverConfig.SnapshotWindow chunks in
//     flight to each receiver (MsgSnapshotChunk) and sends more as they
//     are acknowledged (MsgSnapshotChunkOK names the next chunk wanted).
//     A Reject names the chunk the receiver wants: the sender goes back
//     (or forward) to it. Without an acknowledgement for SnapshotResend
//     it sends again from the last one acknowledged; after SnapshotAbandon it gives up (the
//     core asks again later, and the receiver resumes).
//   - The receiver stores each chunk as it comes (Disk.StageSnapshotChunk),
//     in order: a chunk that does not fit is answered with Reject and the
//     chunk it wants, so a transfer cut anywhere, a restart of either end
//     or a new sender resumes where the receiver's disk stands. The disk
//     checks the length and CRC-32C once the last chunk is in.
//   - Only then does the receiving core hear of it: the driver steps it a
//     MsgSnapshot without data; the core installs it like any snapshot
//     and the Write that follows tells the disk to make the staged
//     snapshot its own (crash-safe: Storage switches one metadata record).
//
// The memory a transfer takes is the window's chunks on each side, not the
// snapshot. While it sends a snapshot a replica takes no new one (its
// disk would drop the chunks it reads, and the receiver would need the
// entries right after the snapshot, which a new one would compact away),
// unless its log has grown to four snapshot intervals.

import (
	"errors"
	"slices"

	"github.com/chubbygo/chubby/replica/vr"
)

// MaxSnapshotChunkBytes bounds one chunk a replica accepts; Storage stores
// snapshots in chunks of SnapshotChunkBytes.
const MaxSnapshotChunkBytes = 1 << 20

// ChunkInfo describes a stored snapshot as its disk holds it: Chunks
// pieces, Length bytes in all, with CRC-32C Sum. Two replicas' snapshots
// at the same index are the same bytes (the state machine is
// deterministic), so Index and these identify a transfer.
type ChunkInfo struct {
	Index  uint64
	Chunks uint32
	Length uint64
	Sum    uint32
}

func (c ChunkInfo) chunk(n uint32) *vr.SnapshotChunk {
	return &vr.SnapshotChunk{N: n, Chunks: c.Chunks, Length: c.Length, Sum: c.Sum}
}

// outgoing is a transfer this replica sends.
type outgoing struct {
	to     uint64
	meta   vr.SnapshotMeta
	info   ChunkInfo
	view   uint64 // of the latest MsgSnapshot the core asked for
	commit uint64
	stamp  uint64
	sent   uint32 // next chunk to send
	acked  uint32 // chunks the receiver has
	// gen counts the times the sender went back (a Reject, a resend):
	// chunks carry it (Message.Op) and a Reject echoes it, so the other
	// chunks in flight, which draw Rejects too, and Rejects delayed from
	// before, do not send the window again each.
	gen    uint64
	heard  int64 // driver clock: last acknowledgement (or the start)
	resent int64 // driver clock: last go-back
}

// incoming is the transfer this replica receives (at most one).
type incoming struct {
	info ChunkInfo
	next uint32 // chunks stored
}

func (in *incoming) complete() bool { return in != nil && in.next == in.info.Chunks }

// sendSnapshot starts (or refreshes) the transfer the core asked for with
// m, a MsgSnapshot without data.
func (d *Driver) sendSnapshot(m *vr.Message) {
	if o := d.out[m.To]; o != nil && o.meta.Index == m.Snapshot.Index {
		o.view, o.commit, o.stamp = m.View, m.Commit, m.Stamp
		return
	}
	_, info, err := d.disk.ReadSnapshotChunk(m.Snapshot.Index, 0)
	if err != nil {
		// A newer snapshot was stored after the core chose this one; the
		// core asks again later.
		d.cfg.Logger.Warn("snapshot to send is gone", "index", m.Snapshot.Index, "err", err)
		return
	}
	now := d.clock()
	o := &outgoing{to: m.To, meta: *m.Snapshot, info: info, view: m.View, commit: m.Commit, stamp: m.Stamp,
		heard: now, resent: now}
	o.meta.Members = o.meta.Members.Clone()
	d.out[m.To] = o
	d.cfg.Logger.Info("sending snapshot", "to", m.To, "index", info.Index, "chunks", info.Chunks, "bytes", info.Length)
	d.pump(o)
}

// pump sends the chunks the window allows.
func (d *Driver) pump(o *outgoing) {
	var ms []vr.Message
	for o.sent < o.info.Chunks && o.sent-o.acked < uint32(d.cfg.SnapshotWindow) {
		data, info, err := d.disk.ReadSnapshotChunk(o.info.Index, o.sent)
		if err != nil || info != o.info {
			d.cfg.Logger.Warn("snapshot transfer abandoned: the snapshot is gone", "to", o.to, "index", o.info.Index, "err", err)
			delete(d.out, o.to)
			break
		}
		meta := o.meta
		ms = append(ms, vr.Message{Type: vr.MsgSnapshotChunk, From: d.cfg.ID, To: o.to, View: o.view, Op: o.gen,
			Commit: o.commit, Stamp: o.stamp, Snapshot: &meta, SnapshotData: data, Chunk: o.info.chunk(o.sent)})
		o.sent++
	}
	if len(ms) > 0 {
		d.tr.Send(ms)
		d.xfer.ChunksSent += uint64(len(ms))
	}
}

// onChunkOK takes a receiver's acknowledgement.
func (d *Driver) onChunkOK(m *vr.Message) {
	o := d.out[m.From]
	if o == nil || m.Snapshot.Index != o.info.Index || m.Chunk.N > o.info.Chunks { // validChunk checked the rest
		return
	}
	n := m.Chunk.N
	o.heard = d.clock()
	switch {
	case n == o.info.Chunks:
		delete(d.out, m.From)
		d.cfg.Logger.Info("snapshot sent", "to", m.From, "index", o.info.Index)
		return
	case m.Reject && m.Op != o.gen:
		return // about chunks sent before the last go-back
	case m.Reject:
		o.sent, o.acked = n, n // resume where the receiver stands
		o.gen++
	case n > o.acked && n <= o.sent:
		o.acked = n
	}
	d.pump(o)
}

// tickTransfers sends again what was not acknowledged and gives up on
// receivers that stopped answering. Peers in id order: a simulation
// replays the same.
func (d *Driver) tickTransfers() {
	if len(d.out) == 0 {
		return
	}
	now := d.clock()
	ids := make([]uint64, 0, len(d.out))
	for id := range d.out {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		o := d.out[id]
		switch {
		case now-o.heard > d.cfg.SnapshotAbandon:
			d.cfg.Logger.Warn("snapshot transfer abandoned: the receiver stopped answering", "to", id, "index", o.info.Index)
			delete(d.out, id)
		case now-o.heard > d.cfg.SnapshotResend && now-o.resent > d.cfg.SnapshotResend:
			o.resent = now
			o.sent = o.acked
			o.gen++
			d.xfer.ChunkResends++
			d.pump(o)
		}
	}
}

// validChunk checks what a chunk message says on its own.
func validChunk(m *vr.Message, self uint64) bool {
	s, c := m.Snapshot, m.Chunk
	switch {
	case s == nil || c == nil || m.To != self || m.From == self:
		return false
	case s.Index == 0 || s.View > m.View || s.Members.Validate() != nil:
		return false
	case c.Chunks == 0 || c.N > c.Chunks || c.Length > MaxSnapshotBytes:
		return false
	case uint64(c.Chunks) > c.Length+1 || c.Length > uint64(c.Chunks)*MaxSnapshotChunkBytes:
		return false
	case m.Type == vr.MsgSnapshotChunk && (c.N == c.Chunks || len(m.SnapshotData) > MaxSnapshotChunkBytes):
		return false
	}
	return true
}

// onChunk stores a chunk of the transfer this replica receives and
// acknowledges it; once all are stored, the core hears of the snapshot.
func (d *Driver) onChunk(m *vr.Message) {
	c := m.Chunk
	info := ChunkInfo{Index: m.Snapshot.Index, Chunks: c.Chunks, Length: c.Length, Sum: c.Sum}
	if m.View < d.node.View() {
		return // from a primary of an earlier view: it would only disturb
	}
	if info.Index <= d.applied {
		d.ackChunk(m, info.Chunks, false) // nothing to do: we are past it
		return
	}
	in := d.in
	if in == nil || in.info != info {
		if c.N != 0 {
			d.ackChunk(m, 0, true)
			return
		}
		in = &incoming{info: info}
		d.in = in
	}
	if in.complete() {
		d.ackChunk(m, in.next, false)
		d.offerSnapshot(m)
		return
	}
	if c.N != in.next {
		d.ackChunk(m, in.next, true)
		return
	}
	next, err := d.disk.StageSnapshotChunk(*m.Snapshot, info, c.N, m.SnapshotData)
	switch {
	case errors.Is(err, ErrCorrupt):
		// The bytes are not the snapshot they claim to be (a peer's
		// bug, or damage on the way): start over.
		d.cfg.Logger.Warn("snapshot transfer refused", "from", m.From, "index", info.Index, "err", err)
		d.in = nil
		d.ackChunk(m, 0, true)
		return
	case err != nil:
		d.fail(err)
		return
	}
	in.next = next
	d.xfer.ChunksStored++
	d.ackChunk(m, next, false)
	if in.complete() {
		d.cfg.Logger.Info("snapshot received", "from", m.From, "index", info.Index, "bytes", info.Length)
		d.offerSnapshot(m)
	}
}

// offerSnapshot steps the core a MsgSnapshot for the staged snapshot,
// with the view, commit and stamp of the chunk message m.
func (d *Driver) offerSnapshot(m *vr.Message) {
	meta := *m.Snapshot
	meta.Members = meta.Members.Clone()
	_ = d.node.Step(vr.Message{Type: vr.MsgSnapshot, From: m.From, To: m.To, View: m.View,
		Commit: m.Commit, Stamp: m.Stamp, Snapshot: &meta})
}

func (d *Driver) ackChunk(m *vr.Message, next uint32, reject bool) {
	meta := vr.SnapshotMeta{Index: m.Snapshot.Index, View: m.Snapshot.View, Members: m.Snapshot.Members.Clone()}
	d.tr.Send([]vr.Message{{Type: vr.MsgSnapshotChunkOK, From: d.cfg.ID, To: m.From, View: m.View, Op: m.Op,
		Reject: reject, Snapshot: &meta, Chunk: &vr.SnapshotChunk{N: next, Chunks: m.Chunk.Chunks, Length: m.Chunk.Length, Sum: m.Chunk.Sum}}})
}

// sendingSnapshot reports whether a transfer is under way from here.
func (d *Driver) sendingSnapshot() bool { return len(d.out) > 0 }
