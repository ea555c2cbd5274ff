package cell

import (
	"context"
	"errors"
	"strconv"

	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/replica"
)

// Backup and restore.
//
// A backup (chubbyfs snapshot save) is the master's stored snapshot: the
// master stores a snapshot of its state as it is now the way it stores
// the periodic ones (captured between two commands, encoded from the
// shadow and written off the replica loop), so a backup stops the cell no
// longer than a replica's own snapshot does, and then serves it from its
// disk chunk by chunk (SnapshotRead), keeping it while the reads come.

// snapshotRead serves one SnapshotRead on the master: index 0 stores a
// new snapshot and answers its first chunk.
func (s *Server) snapshotRead(ctx context.Context, index uint64, chunk uint32) (*chubby.SnapshotReadResponse, error) {
	if index == 0 {
		info, err := s.log.SnapshotNow(ctx)
		if err != nil {
			return nil, snapshotErr(0, err)
		}
		index = info.Index
		s.cfg.Logger.Info("backup: snapshot stored for a backup", "index", info.Index, "bytes", info.Length, "chunks", info.Chunks)
	}
	data, info, err := s.log.ReadSnapshotChunk(index, chunk)
	if err != nil {
		return nil, snapshotErr(index, err)
	}
	r := &chubby.SnapshotReadResponse{
		Cell: s.cfg.Cell, Index: int64(info.Index), Chunks: int32(info.Chunks), Length: int64(info.Length),
		Checksum: int64(info.Sum), Chunk: int32(chunk), Data: data,
		LayoutVersion: replica.LayoutVersion, CommandVersion: fs.CommandVersion,
		MasterId: strconv.FormatUint(s.cfg.ID, 10),
	}
	if chunk == 0 {
		_, app, err := replica.DecodeStoredSnapshot(info.Index, data)
		if err == nil {
			r.SnapshotVersion, err = fs.SnapshotVersionOf(app)
		}
		if err != nil {
			return nil, fs.Errorf(chubby.ErrorCode_INTERNAL, "the stored snapshot at %d: %v", info.Index, err)
		}
	}
	return r, nil
}

// snapshotErr is SnapshotRead's error for err.
func snapshotErr(index uint64, err error) error {
	var nm *replica.NotMasterError
	switch {
	case errors.Is(err, replica.ErrNoSnapshot):
		return fs.Errorf(chubby.ErrorCode_NOT_FOUND, "%v: the snapshot at %d is gone from this master (replaced, or another master answers); start the backup again", err, index)
	case errors.Is(err, replica.ErrNoChunk):
		return invalid("%v", err)
	case errors.As(err, &nm):
		return fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "snapshot for a backup: this replica stopped being the master: %v", err)
	}
	// The replica stopping, the call's deadline, a failed save or read:
	// the caller may try again.
	return fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "snapshot for a backup: %v", err)
}
