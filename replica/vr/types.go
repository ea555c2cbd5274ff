package vr

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// EntryType tells what a log entry carries.
type EntryType uint8

const (
	// EntryCommand is an application command (an encoded fsm.Command in the
	// cell). The core never looks inside it.
	EntryCommand EntryType = 1
	// EntryConfig carries a whole configuration (EncodeConfig). Entry 1 of
	// every log is the initial configuration; a later one, proposed with
	// Node.ProposeConfig, replaces it (reconfig.go says when).
	EntryConfig EntryType = 2
)

func (t EntryType) valid() bool { return t == EntryCommand || t == EntryConfig }

func (t EntryType) String() string {
	switch t {
	case EntryCommand:
		return "command"
	case EntryConfig:
		return "config"
	}
	return fmt.Sprintf("EntryType(%d)", uint8(t))
}

// Entry is one slot of the replicated log.
//
// View is the view in which a primary first assigned the entry its index
// (its viewstamp is (View, Index)). Views along a log never decrease, and
// two logs that hold an entry with the same Index and View hold the same
// entries up to that index (log matching). The protocol relies on that to
// compare logs by their views alone, without shipping them.
type Entry struct {
	Index uint64
	View  uint64
	Type  EntryType
	Data  []byte
}

// Member is one replica of a configuration. Its addresses are opaque to
// the core, which only keeps them with the configuration (in the log and
// in snapshots): ClientAddr is where clients reach the replica (the cell
// gives it in NOT_MASTER hints and its status), PeerAddr where the other
// replicas do. Either may be empty. A Learner receives the log and
// snapshots but votes in nothing and counts in no quorum.
type Member struct {
	ID         uint64
	ClientAddr string
	PeerAddr   string
	Learner    bool
}

// addrSep separates a member's two addresses in its packed form.
const addrSep = "|"

// PackedAddr returns m's addresses as one string, the form of the formats
// that carry a single address per member (EncodeMembers, the peer
// protocol's Member.addr): ClientAddr, then "|" and PeerAddr if PeerAddr is
// set. These are the bytes those formats held before the two addresses
// were told apart, so logs and snapshots written then still read.
func (m Member) PackedAddr() string {
	if m.PeerAddr == "" {
		return m.ClientAddr
	}
	return m.ClientAddr + addrSep + m.PeerAddr
}

// UnpackAddr returns the addresses of a PackedAddr string: all of it is
// ClientAddr when it has no "|".
func UnpackAddr(packed string) (clientAddr, peerAddr string) {
	clientAddr, peerAddr, _ = strings.Cut(packed, addrSep)
	return clientAddr, peerAddr
}

// Members is a configuration's replicas, sorted by ID, distinct, ID > 0,
// at least one of them a voter. A quorum is a majority of the voters.
type Members []Member

// Limits of a configuration. MaxMemberAddr bounds a member's PackedAddr.
const (
	MaxMembers    = 9
	MaxMemberAddr = 256
)

// Validate checks that m is a usable configuration.
func (m Members) Validate() error {
	if len(m) == 0 || len(m) > MaxMembers {
		return fmt.Errorf("vr: configuration of %d replicas, want 1..%d", len(m), MaxMembers)
	}
	for i, x := range m {
		if x.ID == 0 {
			return errors.New("vr: replica id 0 is reserved")
		}
		if i > 0 && m[i-1].ID >= x.ID {
			return errors.New("vr: configuration ids must be sorted and distinct")
		}
		if strings.Contains(x.ClientAddr, addrSep) {
			return fmt.Errorf("vr: replica %d client address %q contains %q", x.ID, x.ClientAddr, addrSep)
		}
		if n := len(x.PackedAddr()); n > MaxMemberAddr {
			return fmt.Errorf("vr: replica %d addresses of %d bytes, more than %d", x.ID, n, MaxMemberAddr)
		}
	}
	if len(m.Voters()) == 0 {
		return errors.New("vr: configuration without a voter")
	}
	return nil
}

// IDs returns the replica ids in order.
func (m Members) IDs() []uint64 {
	ids := make([]uint64, len(m))
	for i, x := range m {
		ids[i] = x.ID
	}
	return ids
}

// Contains reports whether id is a member.
func (m Members) Contains(id uint64) bool {
	_, ok := slices.BinarySearchFunc(m, id, func(x Member, id uint64) int {
		switch {
		case x.ID < id:
			return -1
		case x.ID > id:
			return 1
		}
		return 0
	})
	return ok
}

// Clone returns a copy of m.
func (m Members) Clone() Members { return slices.Clone(m) }

const membersVersion = 1

// EncodeMembers returns the first format of an EntryConfig payload, for a
// configuration of voters only in epoch 0: version byte, count, then per
// member its id and length-prefixed PackedAddr. Learner flags are not
// written; EncodeConfig chooses the format.
func EncodeMembers(m Members) []byte {
	b := []byte{membersVersion}
	b = binary.AppendUvarint(b, uint64(len(m)))
	for _, x := range m {
		a := x.PackedAddr()
		b = binary.AppendUvarint(b, x.ID)
		b = binary.AppendUvarint(b, uint64(len(a)))
		b = append(b, a...)
	}
	return b
}

// DecodeMembers decodes and validates an EntryConfig payload.
func DecodeMembers(b []byte) (Members, error) {
	bad := errors.New("vr: malformed configuration")
	if len(b) == 0 || b[0] != membersVersion {
		return nil, bad
	}
	b = b[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n == 0 || n > MaxMembers {
		return nil, bad
	}
	b = b[k:]
	m := make(Members, 0, n)
	for range n {
		id, k := binary.Uvarint(b)
		if k <= 0 {
			return nil, bad
		}
		b = b[k:]
		l, k := binary.Uvarint(b)
		if k <= 0 || l > MaxMemberAddr || uint64(len(b)-k) < l {
			return nil, bad
		}
		b = b[k:]
		client, peer := UnpackAddr(string(b[:l]))
		m = append(m, Member{ID: id, ClientAddr: client, PeerAddr: peer})
		b = b[l:]
	}
	if len(b) != 0 {
		return nil, bad
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m, nil
}

// HardState is what a replica must have on disk before it acts on it.
type HardState struct {
	// View is the highest view this replica has entered (started a view
	// change for, or joined). Persisted before any message of that view is
	// sent, so a restarted replica never acts in an older view.
	View uint64
	// LastNormalView is the latest view in which this replica's log was
	// known to be a prefix of that view's primary log holding the whole log
	// the view started with. It orders logs in a view change. It is
	// persisted only after the log it describes.
	LastNormalView uint64
	// Commit is a hint: entries up to it are known committed. It may lag;
	// it lets a restarted replica apply its log without waiting for the
	// primary.
	Commit uint64
}

// SnapshotMeta describes an application snapshot: the state after applying
// every entry up to Index, whose view was View, under the configuration
// Members and the rest of its configuration (see Configuration).
type SnapshotMeta struct {
	Index   uint64
	View    uint64
	Members Members
	// Epoch, Proposer, OpenIndex, OpenView, Retired: those of the
	// configuration (Configuration).
	Epoch, Proposer, OpenIndex, OpenView uint64
	Retired                              []uint64
}

// Config returns the configuration the snapshot was taken under.
func (s SnapshotMeta) Config() Configuration {
	return Configuration{Epoch: s.Epoch, Proposer: s.Proposer, OpenIndex: s.OpenIndex, OpenView: s.OpenView, Members: s.Members.Clone(),
		Retired: slices.Clone(s.Retired)}
}

// SetConfig sets the snapshot's configuration.
func (s *SnapshotMeta) SetConfig(c Configuration) {
	s.Members, s.Epoch, s.Proposer, s.OpenIndex, s.OpenView = c.Members.Clone(), c.Epoch, c.Proposer, c.OpenIndex, c.OpenView
	s.Retired = slices.Clone(c.Retired)
}

// Clone returns a copy of s.
func (s SnapshotMeta) Clone() SnapshotMeta {
	s.Members = s.Members.Clone()
	s.Retired = slices.Clone(s.Retired)
	return s
}

// Snapshot is a snapshot to install: its metadata and the application's
// bytes. Data is nil when the driver received the snapshot in chunks and
// holds it on its disk already (MsgSnapshot without SnapshotData).
type Snapshot struct {
	Meta SnapshotMeta
	Data []byte
}

// SnapshotChunk places one chunk of a snapshot transfer between drivers
// (MsgSnapshotChunk, MsgSnapshotChunkOK). The core never acts on one.
type SnapshotChunk struct {
	N      uint32 // this chunk's number; in an OK, the next chunk wanted
	Chunks uint32 // how many chunks the stored snapshot has
	Length uint64 // its length in bytes, all chunks together
	Sum    uint32 // CRC-32C of those bytes
}

// Status is a replica's protocol status in its view.
type Status uint8

const (
	// StatusNormal: the replica takes part in its view as primary or
	// backup; its log is a prefix of the primary's.
	StatusNormal Status = 1
	// StatusViewChange: the replica is changing to its view and accepts
	// nothing from older views.
	StatusViewChange Status = 2
	// StatusRecovering: the view has a primary, but the replica's log does
	// not yet hold the view's start log; it receives entries (or a
	// snapshot) until it does, then becomes normal.
	StatusRecovering Status = 3
)

func (s Status) String() string {
	switch s {
	case StatusNormal:
		return "normal"
	case StatusViewChange:
		return "view-change"
	case StatusRecovering:
		return "recovering"
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Persisted is what a replica found on its disk at start: the hard state,
// the metadata of its latest snapshot (nil when none) and the log entries
// after the snapshot, contiguous.
type Persisted struct {
	HardState HardState
	Snapshot  *SnapshotMeta
	Entries   []Entry
}

// Empty reports whether nothing was ever persisted (a new replica).
func (p Persisted) Empty() bool {
	return p.Snapshot == nil && len(p.Entries) == 0 && p.HardState == HardState{}
}

// Ready is the work the node hands to its driver. The driver must, in this
// order:
//
//  0. send EarlyMessages (it may do so before, or while, it persists: they
//     depend on nothing this Ready writes);
//  1. install Snapshot if set: store it durably, replace the application
//     state with it, and drop the whole log (the log continues after
//     Snapshot.Meta.Index);
//  2. delete the log entries with Index >= TruncateFrom if TruncateFrom > 0;
//  3. append Entries (contiguous, following the log);
//  4. store HardState if set — after the log, because LastNormalView
//     describes the log and must never be ahead of it;
//  5. make all of that durable (one fsync) if MustSync;
//  6. only then send Messages; a MsgSnapshot leaves SnapshotData empty and
//     the driver fills it with the snapshot it stored at Snapshot.Index;
//  7. apply Committed in order;
//  8. call Advance.
//
// Steps 1–4 may be one atomic batch. Between Ready and Advance the driver
// must not call Step, Tick, Propose, Compact or Persisted.
//
// When PersistAsync is set, steps 3–5 may instead be queued to a disk
// writer and the driver goes on at once (applies Committed, calls
// Advance) without waiting for them; once they are durable it reports
// Node.Persisted(Ready.Last(), view). The disk writer must carry out
// queued writes in order, and before the driver carries out a Ready
// without PersistAsync it must wait until every queued write is durable.
type Ready struct {
	HardState    *HardState
	Snapshot     *Snapshot
	TruncateFrom uint64
	Entries      []Entry
	MustSync     bool
	// EarlyMessages are the normal primary's Prepares and Commits when its
	// view is already on disk: a backup may store the entries before the
	// primary does, which takes the primary's fsync off the commit path
	// (the primary counts itself in a quorum only for entries it has
	// persisted, and a primary that restarts never resumes its view, so a
	// backup holding entries its primary lost is harmless).
	EarlyMessages []Message
	Messages      []Message
	// PersistAsync: this Ready only appends entries (and moves the commit
	// number) on the normal primary, and every message in it is early, so
	// nothing waits for its disk write but the primary's own vote in the
	// commit quorum, which Persisted gives. A slow fsync on the primary
	// then no longer holds up commits that a quorum of backups can make.
	PersistAsync bool
	Committed    []Entry
}

// Empty reports whether rd holds no work.
func (rd *Ready) Empty() bool {
	return rd.HardState == nil && rd.Snapshot == nil && rd.TruncateFrom == 0 &&
		len(rd.Entries) == 0 && len(rd.EarlyMessages) == 0 && len(rd.Messages) == 0 && len(rd.Committed) == 0
}

// Last is the index of the last entry the Ready appends (0 if none).
func (rd *Ready) Last() uint64 {
	if len(rd.Entries) == 0 {
		return 0
	}
	return rd.Entries[len(rd.Entries)-1].Index
}
