package vr

import "fmt"

// MsgType names a protocol message.
type MsgType uint8

// The messages. Fields of Message not listed for a type are zero.
const (
	// MsgPrepare (primary → backup): Entries follow PrevOp, whose view is
	// PrevView; Commit is the primary's commit number; Stamp is the lease
	// round. A backup persists the entries, then answers MsgPrepareOK.
	MsgPrepare MsgType = iota + 1
	// MsgPrepareOK (backup → primary): the backup's log matches the
	// primary's up to Op and is on disk (sent only after the persist).
	// Normal says the backup is normal in View (only such answers count
	// toward commits and leases). Reject says a Prepare did not fit: the
	// primary should send from Op+1. Stamp echoes the lease round heard.
	MsgPrepareOK
	// MsgCommit (primary → backup): heartbeat with Commit and Stamp, sent
	// every HeartbeatInterval. Answered with MsgPrepareOK.
	MsgCommit
	// MsgProbe (any → any): "I hear no primary; may I start view View?"
	// A pre-vote: nothing changes until a quorum says yes.
	MsgProbe
	// MsgProbeReply: Granted answers the probe for View.
	MsgProbeReply
	// MsgStartViewChange: the sender is changing to View.
	MsgStartViewChange
	// MsgDoViewChange (→ primary of View): the sender's log in brief:
	// LastNormalView, Op (last index), OpView (its view), Commit, and the
	// log's shape after Commit (PrevOp = Commit, PrevView its view, Runs,
	// Final when the runs reach Op). No entries: the new primary fetches
	// what it misses with MsgGetLog.
	MsgDoViewChange
	// MsgStartView (new primary → backup): View has started with the
	// primary's log of StartOp entries; Commit; the shape of the primary's
	// log after PrevOp (PrevView, Runs, Final). The backup cuts its log
	// where it differs and becomes normal once it holds the first StartOp
	// entries of the primary's log.
	MsgStartView
	// MsgGetLog (new primary → replica with the best log, during the view
	// change): send entries from Op. Also (a replica whose configuration
	// is of an earlier epoch than the receiver's → a voter of the later
	// one), with View in the asker's configuration's epoch: send the
	// committed entries from Op (catch-up, reconfig.go).
	MsgGetLog
	// MsgLog: answer to MsgGetLog: Entries after PrevOp (view PrevView);
	// Op is the sender's last index. A catch-up answer holds only
	// committed entries, and Op and Commit are the sender's commit number
	// (a fetch's answer has no Commit).
	MsgLog
	// MsgSnapshot: the application snapshot described by Snapshot, with
	// SnapshotData (filled by the driver), for a replica whose missing
	// entries were compacted away. Commit as in MsgPrepare when the
	// primary sends it; none in an answer to MsgGetLog.
	MsgSnapshot
	// MsgSnapshotChunk (driver → driver): chunk Chunk.N of the stored
	// snapshot described by Snapshot and Chunk, in SnapshotData; View,
	// Commit and Stamp are those of the MsgSnapshot the sender's core
	// asked for. The bytes of a snapshot travel this way, a bounded
	// window of chunks at a time, and the receiving driver hands its core
	// a MsgSnapshot without data once it has stored them all (see
	// replica's snapshot transfer). Op counts the sender's go-backs.
	// Node.Step refuses it (ErrInvalidMessage, counted as dropped): the
	// driver handles it and never passes it on.
	MsgSnapshotChunk
	// MsgSnapshotChunkOK (driver → driver): the receiver has stored the
	// chunks before Chunk.N of the snapshot at Snapshot.Index and wants
	// Chunk.N next; Reject says a chunk did not fit (send from Chunk.N);
	// Op echoes the chunk's. Node.Step refuses it, as MsgSnapshotChunk.
	MsgSnapshotChunkOK

	msgTypeEnd
)

var msgNames = [...]string{
	MsgPrepare:         "Prepare",
	MsgPrepareOK:       "PrepareOK",
	MsgCommit:          "Commit",
	MsgProbe:           "Probe",
	MsgProbeReply:      "ProbeReply",
	MsgStartViewChange: "StartViewChange",
	MsgDoViewChange:    "DoViewChange",
	MsgStartView:       "StartView",
	MsgGetLog:          "GetLog",
	MsgLog:             "Log",
	MsgSnapshot:        "Snapshot",
	MsgSnapshotChunk:   "SnapshotChunk",
	MsgSnapshotChunkOK: "SnapshotChunkOK",
}

func (t MsgType) String() string {
	if t > 0 && t < msgTypeEnd {
		return msgNames[t]
	}
	return fmt.Sprintf("MsgType(%d)", uint8(t))
}

// Run is a stretch of a log whose entries all have view View, ending at
// index Last. A log's shape after an index is its runs: views never
// decrease along a log, so a handful of runs describe thousands of entries.
type Run struct {
	View uint64
	Last uint64
}

// Message is one protocol message. It is flat (ids, numbers, flags, byte
// slices) so that a transport maps it to Thrift field by field.
type Message struct {
	Type MsgType
	From uint64
	To   uint64
	View uint64

	Op             uint64
	OpView         uint64
	Commit         uint64
	PrevOp         uint64
	PrevView       uint64
	LastNormalView uint64
	StartOp        uint64
	Stamp          uint64

	Normal  bool
	Reject  bool
	Granted bool
	Final   bool

	Entries      []Entry
	Runs         []Run
	Snapshot     *SnapshotMeta
	SnapshotData []byte
	Chunk        *SnapshotChunk
}

func (m *Message) String() string {
	s := fmt.Sprintf("%v %d→%d v%d", m.Type, m.From, m.To, m.View)
	switch m.Type {
	case MsgPrepare, MsgLog:
		s += fmt.Sprintf(" prev=%d/%d n=%d commit=%d", m.PrevOp, m.PrevView, len(m.Entries), m.Commit)
	case MsgPrepareOK:
		s += fmt.Sprintf(" op=%d normal=%v reject=%v stamp=%d", m.Op, m.Normal, m.Reject, m.Stamp)
	case MsgCommit:
		s += fmt.Sprintf(" commit=%d stamp=%d", m.Commit, m.Stamp)
	case MsgProbeReply:
		s += fmt.Sprintf(" granted=%v", m.Granted)
	case MsgDoViewChange:
		s += fmt.Sprintf(" lnv=%d op=%d/%d commit=%d runs=%d", m.LastNormalView, m.Op, m.OpView, m.Commit, len(m.Runs))
	case MsgStartView:
		s += fmt.Sprintf(" start=%d commit=%d prev=%d runs=%d final=%v", m.StartOp, m.Commit, m.PrevOp, len(m.Runs), m.Final)
	case MsgGetLog:
		s += fmt.Sprintf(" from=%d", m.Op)
	case MsgSnapshot, MsgSnapshotChunk, MsgSnapshotChunkOK:
		if m.Snapshot != nil {
			s += fmt.Sprintf(" index=%d/%d", m.Snapshot.Index, m.Snapshot.View)
		}
		if c := m.Chunk; c != nil {
			s += fmt.Sprintf(" chunk=%d/%d reject=%v", c.N, c.Chunks, m.Reject)
		}
	}
	return s
}
