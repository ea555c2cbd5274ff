package cell

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/chubbygo/chubby/cell/backup"
	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/fsm"
	"github.com/chubbygo/chubby/replica"
	"github.com/chubbygo/chubby/replica/vr"
)

// Export: a backup from a stopped replica's data directory.
//
// chubbyfs snapshot save needs a master. A cell that has none and cannot
// elect one needs another way out: a cell that lost a quorum of its disks
// for good (two replicas of three, three of five), or one whose voters are
// all at the last view of an epoch (vr.LastOfEpoch; only disks written by
// releases before the view checks can be there). Export reads one stopped
// replica's directory — its snapshot and its log — applies the log's
// commands to the snapshot, as the replica would on restart, and writes the
// result as a backup file that chubbyd restore seeds a new cell from.
//
// Which entries it applies: by default every command in the replica's log,
// the ones it does not know committed too. Of the replicas of a cell, the
// one whose log has the highest (LastNormalView, Last) — the one a view
// change would pick — holds every committed entry, although its commit
// hint may lag (an entry is committed once a quorum holds it, before every
// replica hears so). Its entries past the hint were either committed, and
// acknowledged writes are among them, or never committed, in which case no
// client heard "done" and one that heard nothing may see it applied, as
// after any failover. So: run Export with Dry on every surviving replica
// (LogState), export the one with the highest (LastNormalView, Last), and
// seed every replica of the new cell from that file. ExportOptions.Committed
// applies only what the replica knows committed instead.

// LogState is what a replica's data directory says of its log: what an
// operator compares across replicas before exporting one.
type LogState struct {
	ID             uint64 `json:"id"`               // the replica's id, from its identity (0 if it has none)
	View           uint64 `json:"view"`             // the latest view it entered
	Epoch          uint64 `json:"epoch"`            // View's epoch
	ViewCounter    uint64 `json:"view_counter"`     // View's counter within its epoch
	LastOfEpoch    bool   `json:"last_of_epoch"`    // View is the last of its epoch (vr.LastOfEpoch)
	LastNormalView uint64 `json:"last_normal_view"` // orders logs: the higher, the more complete
	Commit         uint64 `json:"commit"`           // entries up to here are known committed
	SnapshotIndex  uint64 `json:"snapshot_index"`   // the stored snapshot's index (0: none)
	Last           uint64 `json:"last"`             // the log's last index
}

// ExportOptions configures Export.
type ExportOptions struct {
	// Cell is the name written in the backup's header. Default "local".
	Cell string
	// Committed applies only the entries the replica knows committed
	// (LogState.Commit) instead of its whole log.
	Committed bool
	// Dry reads and applies but writes nothing: it tells what an export
	// would hold.
	Dry bool
	// Limits are the fs limits the state is checked against, as
	// chubbyd serve will use them. Default fs.DefaultLimits().
	Limits *fs.Limits
	// Logger gets Badger's warnings. Default: discarded.
	Logger *slog.Logger
}

// Exported is what Export read and wrote.
type Exported struct {
	LogState
	Index       uint64            // the exported state is the state after this entry
	Applied     int               // commands applied on top of the snapshot
	Uncommitted int               // of them, past the commit hint
	Header      *fsm.BackupHeader // nil on a dry run
	Counts      fs.Counts         // the exported state's size
	Took        time.Duration     // reading, applying and encoding
}

// ErrExportEmpty: the data directory holds no state to export.
var ErrExportEmpty = errors.New("cell: export: the data directory holds no log and no snapshot")

// Export writes to w a backup of the state held in the data directory dir
// of a stopped replica (see the comment at the top of this file for which
// entries it applies). The directory is only read. A replica running on
// it holds it locked: Export then fails with an error wrapping
// replica.ErrInUse. An entry of a newer format than this release reads is
// refused (a *fs.FormatError, naming both versions), as the replica
// itself would halt on it.
func Export(dir string, w io.Writer, o ExportOptions) (*Exported, error) {
	start := time.Now()
	if o.Cell == "" {
		o.Cell = DefaultConfig().Cell
	}
	limits := fs.DefaultLimits()
	if o.Limits != nil {
		limits = *o.Limits
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	empty, err := dirEmpty(dir)
	if err != nil {
		return nil, fmt.Errorf("cell: export: %w", err)
	}
	if empty {
		return nil, fmt.Errorf("%w: %s", ErrExportEmpty, dir)
	}
	st, err := replica.OpenStorage(dir, replica.StorageOptions{Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("cell: export: %w", err)
	}
	defer st.Close()
	p, app, err := st.ReadPersisted()
	if err != nil {
		return nil, fmt.Errorf("cell: export: %w", err)
	}
	if p.Empty() {
		return nil, fmt.Errorf("%w: %s", ErrExportEmpty, dir)
	}
	out := &Exported{LogState: logStateOf(p)}
	out.ID, err = identityID(st)
	if err != nil {
		return nil, fmt.Errorf("cell: export: %w", err)
	}
	state, meta, err := replay(p, app, limits, o.Committed, out)
	if err != nil {
		return nil, fmt.Errorf("cell: export: %w", err)
	}
	out.Counts = state.Counts()
	if o.Dry {
		out.Took = time.Since(start)
		return out, nil
	}
	snap := state.Snapshot()
	v, err := fs.SnapshotVersionOf(snap)
	if err != nil {
		return nil, fmt.Errorf("cell: export: %w", err)
	}
	h := &fsm.BackupHeader{
		Cell: o.Cell, Index: int64(meta.Index),
		SnapshotVersion: v, LayoutVersion: replica.LayoutVersion, CommandVersion: fs.CommandVersion,
		SavedUnixMs: start.UnixMilli(), MasterId: "export of replica " + strconv.FormatUint(out.ID, 10),
	}
	if err := backup.Write(w, h, replica.EncodeStoredSnapshot(meta, snap)); err != nil {
		return nil, fmt.Errorf("cell: export: %w", err)
	}
	out.Header, out.Took = h, time.Since(start)
	return out, nil
}

// logStateOf describes a replica's persisted log.
func logStateOf(p vr.Persisted) LogState {
	hs := p.HardState
	ls := LogState{
		View: hs.View, Epoch: vr.EpochOf(hs.View), ViewCounter: vr.ViewCounter(hs.View), LastOfEpoch: vr.LastOfEpoch(hs.View),
		LastNormalView: hs.LastNormalView, Commit: hs.Commit,
	}
	if p.Snapshot != nil {
		ls.SnapshotIndex, ls.Last = p.Snapshot.Index, p.Snapshot.Index
	}
	if n := len(p.Entries); n > 0 {
		ls.Last = p.Entries[n-1].Index
	}
	return ls
}

// replay applies p's commands to the state of its snapshot (an empty state
// without one), all of them or only those up to the commit hint, and
// returns the state and the metadata of a snapshot of it.
func replay(p vr.Persisted, app []byte, limits fs.Limits, committed bool, out *Exported) (*fs.State, vr.SnapshotMeta, error) {
	state := fs.New(limits)
	var meta vr.SnapshotMeta
	if p.Snapshot != nil {
		var err error
		if state, err = fs.Restore(app, limits); err != nil {
			return nil, meta, fmt.Errorf("the snapshot at %d: %w", p.Snapshot.Index, err)
		}
		meta = *p.Snapshot
	}
	conf := meta.Config()
	for _, e := range p.Entries {
		if e.Index <= meta.Index {
			continue
		}
		if committed && e.Index > p.HardState.Commit {
			break
		}
		switch e.Type {
		case vr.EntryConfig:
			c, err := vr.DecodeConfig(e.Data)
			if err != nil {
				return nil, meta, fmt.Errorf("configuration entry %d: %w", e.Index, err)
			}
			conf = c
		case vr.EntryCommand:
			if _, _, err := state.ApplyBytes(e.Data); err != nil {
				var fe *fs.FormatError
				if errors.As(err, &fe) {
					return nil, meta, fmt.Errorf("entry %d: %w", e.Index, err)
				}
				// The replica itself answers such an entry with an
				// INTERNAL error and changes nothing (machine.Apply):
				// so does the export.
			}
			out.Applied++
			if e.Index > p.HardState.Commit {
				out.Uncommitted++
			}
		}
		meta.Index, meta.View = e.Index, e.View
	}
	meta.SetConfig(conf)
	out.Index = meta.Index
	return state, meta, nil
}

// identityID is the replica id in st's identity record (0 without one).
func identityID(st *replica.Storage) (uint64, error) {
	b, err := st.GetMeta(identityMeta)
	if err != nil || b == nil {
		return 0, err
	}
	id, _, err := decodeIdentity(b)
	return id, err
}

// dirEmpty reports whether dir holds nothing; a directory that does not
// exist is an error (Export must not create one).
func dirEmpty(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	return len(entries) == 0, nil
}
