package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/chubbygo/chubby/replica/vr"
)

// A snapshot received from another replica is staged chunk by chunk under
// t/<index>/<n>, beside the current snapshot, with its progress in
// m/staged (what it is, how many chunks are stored, the CRC-32C so far),
// written in the same transaction as each chunk: after a crash the record
// names exactly the chunks that are there, and the transfer resumes from
// them. Chunks are not synced one by one; the install syncs.

// stagedRecord is the m/staged record.
type stagedRecord struct {
	ChunkInfo
	next uint32 // chunks stored
	crc  uint32 // CRC-32C of chunks 0..next-1
	have uint64 // their length
}

const stagedRecordBytes = 8 + 4 + 8 + 4 + 4 + 4 + 8

func (r stagedRecord) encode() []byte {
	b := binary.BigEndian.AppendUint64(nil, r.Index)
	b = binary.BigEndian.AppendUint32(b, r.Chunks)
	b = binary.BigEndian.AppendUint64(b, r.Length)
	b = binary.BigEndian.AppendUint32(b, r.Sum)
	b = binary.BigEndian.AppendUint32(b, r.next)
	b = binary.BigEndian.AppendUint32(b, r.crc)
	return binary.BigEndian.AppendUint64(b, r.have)
}

func decodeStaged(v []byte) (stagedRecord, error) {
	var r stagedRecord
	if len(v) != stagedRecordBytes {
		return r, fmt.Errorf("%w: staged snapshot record of %d bytes", ErrCorrupt, len(v))
	}
	r.Index = binary.BigEndian.Uint64(v[0:])
	r.Chunks = binary.BigEndian.Uint32(v[8:])
	r.Length = binary.BigEndian.Uint64(v[12:])
	r.Sum = binary.BigEndian.Uint32(v[20:])
	r.next = binary.BigEndian.Uint32(v[24:])
	r.crc = binary.BigEndian.Uint32(v[28:])
	r.have = binary.BigEndian.Uint64(v[32:])
	if r.next > r.Chunks || r.Length > MaxSnapshotBytes || r.have > r.Length {
		return r, fmt.Errorf("%w: staged snapshot record %d/%d chunks, %d bytes", ErrCorrupt, r.next, r.Chunks, r.Length)
	}
	return r, nil
}

func readStaged(txn *badger.Txn) (stagedRecord, bool, error) {
	item, err := txn.Get(keyStageMeta)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return stagedRecord{}, false, nil
	}
	if err != nil {
		return stagedRecord{}, false, err
	}
	var r stagedRecord
	err = item.Value(func(v []byte) error {
		r, err = decodeStaged(v)
		return err
	})
	return r, err == nil, err
}

// Staged returns the snapshot being received and how many of its chunks
// are stored (0 and no error when none is).
func (s *Storage) Staged() (ChunkInfo, uint32, error) {
	var r stagedRecord
	err := s.db.View(func(txn *badger.Txn) error {
		var err error
		r, _, err = readStaged(txn)
		return err
	})
	return r.ChunkInfo, r.next, err
}

// StageSnapshotChunk stores chunk n of the snapshot info describes (see
// Disk.StageSnapshotChunk). The last chunk is checked: the whole must have
// info's length and CRC, and its envelope must be meta's.
func (s *Storage) StageSnapshotChunk(meta vr.SnapshotMeta, info ChunkInfo, n uint32, data []byte) (uint32, error) {
	if len(data) > MaxSnapshotChunkBytes || info.Length > MaxSnapshotBytes || n >= info.Chunks {
		return 0, fmt.Errorf("%w: chunk %d of %d, %d bytes", ErrCorrupt, n, info.Chunks, len(data))
	}
	var old stagedRecord
	var had bool
	if err := s.db.View(func(txn *badger.Txn) (err error) {
		old, had, err = readStaged(txn)
		return err
	}); err != nil {
		return 0, err
	}
	r := stagedRecord{ChunkInfo: info}
	if n == 0 {
		if had {
			if err := s.dropStaged(old); err != nil {
				return 0, err
			}
		}
	} else {
		if !had || old.ChunkInfo != info || old.next != n {
			return old.next, fmt.Errorf("%w: chunk %d does not follow what is staged", ErrCorrupt, n)
		}
		r = old
	}
	r.next = n + 1
	r.crc = crc32.Update(r.crc, castagnoli, data)
	r.have += uint64(len(data))
	switch {
	case r.have > r.Length || (r.next == r.Chunks && r.have != r.Length):
		return 0, s.refuseStaged(r, "its length")
	case r.next == r.Chunks && r.crc != r.Sum:
		return 0, s.refuseStaged(r, "its checksum")
	}
	err := s.db.Update(func(txn *badger.Txn) error {
		if err := txn.Set(stageKey(info.Index, n), data); err != nil {
			return err
		}
		return txn.Set(keyStageMeta, r.encode())
	})
	if err != nil {
		return 0, fmt.Errorf("stage snapshot chunk: %w", err)
	}
	if r.next == r.Chunks {
		if err := s.checkStaged(r, meta); err != nil {
			return 0, err
		}
	}
	return r.next, nil
}

// checkStaged checks that the complete staged snapshot's envelope is
// meta's (the view and configuration the core installs).
func (s *Storage) checkStaged(r stagedRecord, meta vr.SnapshotMeta) error {
	var head []byte
	err := s.db.View(func(txn *badger.Txn) error {
		for c := uint32(0); c < r.Chunks && len(head) < envelopeMax; c++ {
			item, err := txn.Get(stageKey(r.Index, c))
			if err != nil {
				return fmt.Errorf("staged chunk %d: %w", c, err)
			}
			if err := item.Value(func(v []byte) error {
				head = append(head, v...)
				return nil
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	got, _, err := decodeSnapshot(r.Index, head)
	if err != nil || got.View != meta.View || !slices.Equal(got.Members, meta.Members) {
		return s.refuseStaged(r, "its envelope")
	}
	return nil
}

// envelopeMax bounds the protocol envelope at the head of a stored
// snapshot; it lies within the first chunk.
const envelopeMax = 64 << 10

// refuseStaged drops a staged snapshot whose bytes fail a check.
func (s *Storage) refuseStaged(r stagedRecord, what string) error {
	if err := s.dropStaged(r); err != nil {
		return err
	}
	return fmt.Errorf("%w: the snapshot received at %d fails %s", ErrCorrupt, r.Index, what)
}

// dropStaged deletes a staged snapshot and its record, unless its chunks
// are the current snapshot's.
func (s *Storage) dropStaged(r stagedRecord) error {
	cur, err := s.snapshotMeta()
	if err != nil {
		return err
	}
	keys := [][]byte{keyStageMeta}
	if !cur.staged || cur.Index != r.Index {
		for c := uint32(0); c < r.next; c++ {
			keys = append(keys, stageKey(r.Index, c))
		}
	}
	return s.deleteKeys(keys, 0)
}

// installStaged makes the complete staged snapshot at meta.Index the
// current one, in place, and drops the whole log (see InstallSnapshot).
func (s *Storage) installStaged(meta vr.SnapshotMeta) error {
	var r stagedRecord
	var had bool
	if err := s.db.View(func(txn *badger.Txn) (err error) {
		r, had, err = readStaged(txn)
		return err
	}); err != nil {
		return err
	}
	if !had || r.Index != meta.Index || r.next != r.Chunks {
		return fmt.Errorf("install snapshot at %d: not staged (staged: %d, %d/%d chunks)", meta.Index, r.Index, r.next, r.Chunks)
	}
	if first, _ := s.Bounds(); meta.Index+1 < first {
		return fmt.Errorf("install snapshot at %d: older than the current one at %d", meta.Index, first-1)
	}
	old, err := s.snapshotMeta()
	if err != nil {
		return err
	}
	// The staged chunks were not synced one by one.
	if err := s.db.Sync(); err != nil {
		return fmt.Errorf("install snapshot: sync: %w", err)
	}
	rec := snapRecord{ChunkInfo: r.ChunkInfo, staged: true}
	return s.switchSnapshot(old, rec, true, func(txn *badger.Txn) error { return txn.Delete(keyStageMeta) })
}
