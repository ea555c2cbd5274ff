package replica

import (
	"fmt"

	"github.com/chubbygo/chubby/replica/vr"
)

// Append writes raw entries at indexes last+1, last+2, ... and fsyncs once:
// the tests' way to fill a log (the replica writes through persistReady).
func (s *Storage) Append(entries [][]byte) error {
	if len(entries) == 0 {
		return nil
	}
	s.mu.Lock()
	next := s.last + 1
	s.mu.Unlock()
	wb := s.db.NewWriteBatch()
	defer wb.Cancel()
	for i, e := range entries {
		if len(e) > MaxEntryBytes {
			return fmt.Errorf("append: entry of %d bytes over the %d limit", len(e), MaxEntryBytes)
		}
		if err := wb.Set(logKey(next+uint64(i)), e); err != nil {
			return fmt.Errorf("append: %w", err)
		}
	}
	if err := wb.Flush(); err != nil {
		return fmt.Errorf("append: flush: %w", err)
	}
	if err := s.db.Sync(); err != nil {
		return fmt.Errorf("append: sync: %w", err)
	}
	s.mu.Lock()
	s.last = next + uint64(len(entries)) - 1
	s.mu.Unlock()
	return nil
}

// encodeSnapshot puts the protocol metadata in front of the application's
// snapshot bytes.
func encodeSnapshot(meta vr.SnapshotMeta, app []byte) []byte {
	return append(snapshotEnvelope(meta), app...)
}
