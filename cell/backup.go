package cell

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/chubbygo/chubby/cell/backup"
	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
	"github.com/chubbygo/chubby/replica"
	"github.com/chubbygo/chubby/replica/vr"
)

// Backup and restore.
//
// A backup (chubbyfs snapshot save) is the master's stored snapshot: the
// master stores a snapshot of its state as it is now the way it stores
// the periodic ones (captured between two commands, encoded from the
// shadow and written off the replica loop), so a backup stops the cell no
// longer than a replica's own snapshot does, and then serves it from its
// disk chunk by chunk (SnapshotRead), keeping it while the reads come.
//
// A restore seeds data directories from a backup (Restore, chubbyd
// restore). Every replica of the new cell is seeded from the same file,
// each with its own id and the new cell's members given on the command
// line, rather than one replica seeded and the others joining it: then
// every voter starts with the same snapshot at the same index under the
// same configuration, a quorum exists from the first moment (no replica
// waits for a snapshot transfer of the whole state before the cell can
// commit), it works for a cell of --peers as for one alone, and the old
// cell's configuration (its members, addresses, epoch) plays no part.
//
// The restored cell serves exactly the saved state: the namespace with
// its contents, metadata, generations and ACLs, the lock state, the
// oracle's mark (so its timestamps start above every one the saved cell
// had handed out when the snapshot was taken), and the sessions, which a
// new master treats as after any failover: each gets a lease, and those
// whose clients do not come back end, releasing their locks (lock-delay
// applies) and ephemeral nodes, so their sequencers are refused from then
// on.

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

// RestoreOptions says what Restore makes of a backup.
type RestoreOptions struct {
	// DataDir is the data directory to seed; it must not exist or be
	// empty.
	DataDir string
	// ID is the replica the directory is for.
	ID uint64
	// Peers are the new cell's replicas, ID among them (as Config.Peers);
	// empty: a cell of ID alone, at Listen.
	Peers  []Peer
	Listen string
	// Limits the state is checked against (default fs.DefaultLimits).
	Limits *fs.Limits
	Logger *slog.Logger // for the storage (default slog.Default())
}

// Restored describes what Restore seeded.
type Restored struct {
	Header     *fsm.BackupHeader
	OldMembers vr.Members // the saved cell's configuration
	Counts     fs.Counts  // the saved state's size
}

// ErrRestoreTarget: Restore's data directory is not empty.
var ErrRestoreTarget = errors.New("cell: restore: the data directory is not empty")

// Restore seeds the data directory o.DataDir of replica o.ID of a new cell
// from the backup r. It reads and checks the whole backup first — the file
// (backup.Read: header, length, CRC-32C), the snapshot's envelope, its
// format version (one newer than this release reads is a *fs.FormatError
// naming both), and the whole state (fs.Restore: every field, reference
// and invariant) — and the new members, and writes nothing unless all of
// it is sound. Then it writes the snapshot, under the new cell's
// configuration, and the replica's identity. Run it for every replica of
// the new cell with the same file and Peers; then start each with
// chubbyd serve with those --id and --peers.
func Restore(r io.Reader, o RestoreOptions) (*Restored, error) {
	limits := fs.DefaultLimits()
	if o.Limits != nil {
		limits = *o.Limits
	}
	peers := o.Peers
	if len(peers) == 0 {
		if o.Listen == "" {
			return nil, errors.New("cell: restore: no peers and no listen address")
		}
		peers = []Peer{{ID: o.ID, Addr: o.Listen, PeerAddr: "127.0.0.1:0"}}
	}
	if o.ID == 0 {
		return nil, errors.New("cell: restore: replica id 0")
	}
	if err := validatePeers(o.ID, peers); err != nil {
		return nil, fmt.Errorf("cell: restore: %w", err)
	}
	h, stored, err := backup.Read(r)
	if err != nil {
		return nil, fmt.Errorf("cell: restore: %w", err)
	}
	oldMeta, app, err := replica.DecodeStoredSnapshot(uint64(h.Index), stored)
	if err != nil {
		return nil, fmt.Errorf("cell: restore: %w: %w", backup.ErrInvalid, err)
	}
	v, err := fs.SnapshotVersionOf(app)
	if err != nil {
		return nil, fmt.Errorf("cell: restore: %w: %w", backup.ErrInvalid, err)
	}
	if v != h.SnapshotVersion {
		return nil, fmt.Errorf("cell: restore: %w: the header says snapshot version %d, the snapshot is version %d", backup.ErrInvalid, h.SnapshotVersion, v)
	}
	st, err := fs.Restore(app, limits)
	if err != nil {
		return nil, fmt.Errorf("cell: restore: the saved state: %w", err)
	}
	out := &Restored{Header: h, OldMembers: oldMeta.Members, Counts: st.Counts()}
	members, _ := (&Server{cfg: Config{Peers: peers}}).initialMembers()
	meta := vr.SnapshotMeta{Index: uint64(h.Index)}
	meta.SetConfig(vr.Configuration{Members: members})
	if err := members.Validate(); err != nil {
		return nil, fmt.Errorf("cell: restore: %w", err)
	}
	created, err := emptyDir(o.DataDir)
	if err != nil {
		return nil, err
	}
	if err := seed(o, meta, app); err != nil {
		undo(o.DataDir, created)
		return nil, err
	}
	return out, nil
}

// emptyDir checks that dir does not exist or is empty, making it if it
// does not exist (created reports that).
func emptyDir(dir string) (created bool, err error) {
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return false, fmt.Errorf("cell: restore: %w", err)
		}
		return true, nil
	case err != nil:
		return false, fmt.Errorf("cell: restore: %w", err)
	case len(ents) > 0:
		return false, fmt.Errorf("%w: %s holds %d entries (restore writes only into a new or empty directory)", ErrRestoreTarget, dir, len(ents))
	}
	return false, nil
}

// undo removes what a failed seed wrote into dir (the directory too if
// Restore made it).
func undo(dir string, created bool) {
	if created {
		_ = os.RemoveAll(dir)
		return
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		_ = os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}

// seed writes the snapshot and the identity into the new storage.
func seed(o RestoreOptions, meta vr.SnapshotMeta, app []byte) (err error) {
	st, err := replica.OpenStorage(o.DataDir, replica.StorageOptions{Logger: o.Logger})
	if err != nil {
		return fmt.Errorf("cell: restore: %w", err)
	}
	defer func() {
		if cerr := st.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("cell: restore: %w", cerr)
		}
	}()
	if err := replica.Seed(st, meta, app); err != nil {
		return fmt.Errorf("cell: restore: %w", err)
	}
	var r [16]byte
	if _, err := rand.Read(r[:]); err != nil {
		return err
	}
	ident := strconv.FormatUint(o.ID, 10) + " " + hex.EncodeToString(r[:])
	if err := st.SetMeta(identityMeta, []byte(ident)); err != nil {
		return fmt.Errorf("cell: restore: %w", err)
	}
	return nil
}
