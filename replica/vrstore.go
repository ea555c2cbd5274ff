package replica

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/chubbygo/chubby/replica/vr"
)

// The view-change protocol's disk, on Storage: log entries carry their view
// and type, the hard state is one metadata value, and a snapshot carries its
// protocol metadata (view, configuration) in front of the application's
// bytes. One Ready is persisted with one write batch and one fsync.

const (
	metaHardState = "vr/hardstate"
	snapMagic     = 0x56525331 // "VRS1"
)

// encodeEntry is an entry's value on disk: type, view, data (the index is
// the key).
func encodeEntry(e vr.Entry) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(e.Data))
	b = append(b, byte(e.Type))
	b = binary.AppendUvarint(b, e.View)
	return append(b, e.Data...)
}

func decodeEntry(index uint64, b []byte) (vr.Entry, error) {
	if len(b) < 2 {
		return vr.Entry{}, fmt.Errorf("%w: entry %d of %d bytes", ErrCorrupt, index, len(b))
	}
	v, n := binary.Uvarint(b[1:])
	if n <= 0 {
		return vr.Entry{}, fmt.Errorf("%w: entry %d view", ErrCorrupt, index)
	}
	return vr.Entry{Index: index, View: v, Type: vr.EntryType(b[0]), Data: b[1+n:]}, nil
}

func encodeHardState(hs vr.HardState) []byte {
	b := binary.BigEndian.AppendUint64(nil, hs.View)
	b = binary.BigEndian.AppendUint64(b, hs.LastNormalView)
	return binary.BigEndian.AppendUint64(b, hs.Commit)
}

func decodeHardState(b []byte) (vr.HardState, error) {
	if b == nil {
		return vr.HardState{}, nil
	}
	if len(b) != 24 {
		return vr.HardState{}, fmt.Errorf("%w: hard state of %d bytes", ErrCorrupt, len(b))
	}
	return vr.HardState{
		View:           binary.BigEndian.Uint64(b[0:]),
		LastNormalView: binary.BigEndian.Uint64(b[8:]),
		Commit:         binary.BigEndian.Uint64(b[16:]),
	}, nil
}

// snapshotEnvelope is what a stored snapshot holds before the
// application's bytes.
func snapshotEnvelope(meta vr.SnapshotMeta) []byte {
	members := vr.EncodeConfig(meta.Config())
	b := binary.BigEndian.AppendUint32(nil, snapMagic)
	b = binary.BigEndian.AppendUint64(b, meta.View)
	b = binary.BigEndian.AppendUint32(b, uint32(len(members)))
	return append(b, members...)
}

func decodeSnapshot(index uint64, b []byte) (vr.SnapshotMeta, []byte, error) {
	bad := fmt.Errorf("%w: snapshot %d envelope", ErrCorrupt, index)
	if len(b) < 16 || binary.BigEndian.Uint32(b) != snapMagic {
		return vr.SnapshotMeta{}, nil, bad
	}
	view := binary.BigEndian.Uint64(b[4:])
	ml := int(binary.BigEndian.Uint32(b[12:]))
	if ml > len(b)-16 {
		return vr.SnapshotMeta{}, nil, bad
	}
	c, err := vr.DecodeConfig(b[16 : 16+ml])
	if err != nil {
		return vr.SnapshotMeta{}, nil, fmt.Errorf("%w: %v", bad, err)
	}
	meta := vr.SnapshotMeta{Index: index, View: view}
	meta.SetConfig(c)
	return meta, b[16+ml:], nil
}

// loadVR reads what the protocol needs at start: hard state, snapshot
// metadata and the log after it. The application's snapshot bytes are
// returned for the state machine.
func (s *Storage) loadVR() (vr.Persisted, []byte, error) {
	var p vr.Persisted
	hsb, err := s.GetMeta(metaHardState)
	if err != nil {
		return p, nil, err
	}
	if p.HardState, err = decodeHardState(hsb); err != nil {
		return p, nil, err
	}
	idx, blob, ok, err := s.LoadSnapshot()
	if err != nil {
		return p, nil, err
	}
	var app []byte
	if ok {
		meta, a, err := decodeSnapshot(idx, blob)
		if err != nil {
			return p, nil, err
		}
		p.Snapshot, app = &meta, a
	}
	first, last := s.Bounds()
	if last >= first {
		raw, err := s.Entries(first, last)
		if err != nil {
			return p, nil, err
		}
		p.Entries = make([]vr.Entry, len(raw))
		for i, b := range raw {
			if p.Entries[i], err = decodeEntry(first+uint64(i), b); err != nil {
				return p, nil, err
			}
		}
	}
	return p, app, nil
}

// persistReady writes a Ready's log changes and hard state in one batch with
// one fsync: entries from truncFrom on are deleted, entries appended, then
// the hard state (after the log it describes, in the same batch).
func (s *Storage) persistReady(truncFrom uint64, entries []vr.Entry, hs *vr.HardState, sync bool) error {
	s.mu.Lock()
	first, last := s.first, s.last
	s.mu.Unlock()
	wb := s.db.NewWriteBatch()
	defer wb.Cancel()
	newLast := last
	if truncFrom > 0 && truncFrom <= last {
		if truncFrom < first {
			return fmt.Errorf("truncate from %d below the log start %d", truncFrom, first)
		}
		for i := truncFrom; i <= last; i++ {
			if err := wb.Delete(logKey(i)); err != nil {
				return fmt.Errorf("truncate: %w", err)
			}
		}
		newLast = truncFrom - 1
	}
	for _, e := range entries {
		if e.Index != newLast+1 {
			return fmt.Errorf("append entry %d after %d: not contiguous", e.Index, newLast)
		}
		v := encodeEntry(e)
		if len(v) > MaxEntryBytes+16 {
			return fmt.Errorf("append: entry %d of %d bytes over the limit", e.Index, len(v))
		}
		if err := wb.Set(logKey(e.Index), v); err != nil {
			return fmt.Errorf("append: %w", err)
		}
		newLast = e.Index
	}
	if hs != nil {
		if err := wb.Set(metaKey(metaHardState), encodeHardState(*hs)); err != nil {
			return fmt.Errorf("hard state: %w", err)
		}
	}
	if err := wb.Flush(); err != nil {
		return fmt.Errorf("persist: flush: %w", err)
	}
	if sync {
		if err := s.db.Sync(); err != nil {
			return fmt.Errorf("persist: sync: %w", err)
		}
	}
	s.mu.Lock()
	s.last = newLast
	s.mu.Unlock()
	return nil
}

// installSnapshot stores a snapshot received from the primary and drops the
// whole log behind it. Storage.InstallSnapshot orders the writes so that a
// crash in between never leaves a shortened log under an old snapshot
// (which a replica that claims its last-normal view must never have).
func (s *Storage) installSnapshot(meta vr.SnapshotMeta, app []byte) error {
	return s.storeSnapshot(meta.Index, [][]byte{snapshotEnvelope(meta), app}, true)
}

// saveVRSnapshot stores the application's snapshot at meta.Index (which is
// in the log) and truncates the log up to it.
func (s *Storage) saveVRSnapshot(meta vr.SnapshotMeta, app []byte) error {
	return s.storeSnapshot(meta.Index, [][]byte{snapshotEnvelope(meta), app}, false)
}

// loadVRSnapshot returns the application bytes of the stored snapshot if
// it is at index.
func (s *Storage) loadVRSnapshot(index uint64) ([]byte, error) {
	idx, blob, ok, err := s.LoadSnapshot()
	if err != nil {
		return nil, err
	}
	if !ok || idx != index {
		return nil, errors.New("no snapshot at that index")
	}
	_, app, err := decodeSnapshot(idx, blob)
	return app, err
}

// DecodeStoredSnapshot splits a snapshot as Storage stores it (and as
// Replicated.ReadSnapshotChunk reads it: the protocol's envelope, then the
// state machine's bytes) taken at index into its metadata and the state
// machine's bytes. b may be a prefix that holds the whole envelope (the
// first chunk): the state machine's bytes are then a prefix too.
func DecodeStoredSnapshot(index uint64, b []byte) (vr.SnapshotMeta, []byte, error) {
	return decodeSnapshot(index, b)
}

// ErrNotEmpty: Seed was given storage that holds a log, a snapshot or a
// hard state.
var ErrNotEmpty = errors.New("replica storage: not empty")

// Seed makes empty storage hold the state machine's snapshot app as the
// state after index, under the configuration of meta (its Index is
// index, its View 0), committed: a replica started on it begins in view 0
// with nothing in its log after the snapshot, as every replica of a new
// cell seeded from the same snapshot and configuration does. (chubbyd
// restore seeds every replica of a cell from one backup this way.)
func Seed(st *Storage, meta vr.SnapshotMeta, app []byte) error {
	empty, err := st.Empty()
	if err != nil {
		return err
	}
	if !empty {
		return ErrNotEmpty
	}
	if meta.Index == 0 || meta.View != 0 {
		return fmt.Errorf("seed: snapshot at index %d, view %d: want an index and view 0", meta.Index, meta.View)
	}
	if err := meta.Members.Validate(); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	if err := st.installSnapshot(meta, app); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	if err := st.persistReady(0, nil, &vr.HardState{Commit: meta.Index}, true); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	return nil
}

// ReadPersisted reads what the protocol keeps on st — the hard state, the
// stored snapshot's metadata and the log after it — and the state
// machine's bytes of that snapshot (nil without one), as a replica reads
// them when it starts. It is for tools that look at a stopped replica's
// data directory (chubbyd export); a running replica holds the directory
// locked, so OpenStorage refuses it.
func (s *Storage) ReadPersisted() (vr.Persisted, []byte, error) {
	return s.loadVR()
}

// EncodeStoredSnapshot is DecodeStoredSnapshot's inverse: the snapshot
// app of the state after meta.Index, as Storage stores it and a backup
// holds it.
func EncodeStoredSnapshot(meta vr.SnapshotMeta, app []byte) []byte {
	env := snapshotEnvelope(meta)
	return append(env[:len(env):len(env)], app...)
}
