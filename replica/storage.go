package replica

import (
	"bytes"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"iter"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"

	"github.com/chubbygo/chubby/replica/vr"
)

// Storage is a replica's disk: the log of committed-or-proposed entries,
// the latest snapshot of the state machine, and small metadata values (the
// epoch now; the view and vote later). It sits on Badger with SyncWrites off
// and one explicit fsync per batch, which is how one fsync serves many
// commands (measured here: per-write fsync gives no group commit at all).
//
// Keys:
//
//	l/<index u64 BE>          a log entry
//	s/<index u64 BE>/<n u32>  chunk n of the snapshot taken at index
//	t/<index u64 BE>/<n u32>  chunk n of a snapshot received from another replica
//	m/snapshot                index, chunk count, length, CRC of the current snapshot
//	                          (and 't' when its chunks are under t/: installed as received)
//	m/staged                  the snapshot being received: what it is, chunks stored, CRC so far
//	m/layout                  the directory's format version (LayoutVersion), in decimal
//	m/<name>                  metadata (the hard state, written with the log in persistReady)
type Storage struct {
	db  *badger.DB
	log *slog.Logger
	dir string

	mu    sync.Mutex // guards first, last
	first uint64     // index of the first entry on disk (snapshot index + 1 when empty)
	last  uint64     // index of the last entry on disk (snapshot index when empty)
}

// StorageOptions tunes Storage. The zero value is the documented default.
type StorageOptions struct {
	// InMemory keeps everything in memory (tests of the layers above only).
	InMemory bool
	// MemTableSize is Badger's memtable size; the largest batch Badger takes
	// in one transaction is 15% of it. Default 16 MiB.
	MemTableSize int64
	Logger       *slog.Logger
}

// MaxEntryBytes bounds a single log entry: one command (a file's content
// is at most 256 KiB) plus its envelope. It is the protocol's bound.
const MaxEntryBytes = vr.MaxEntryBytes

// Limits of one stored value.
const (
	// SnapshotChunkBytes is the size of the chunks a snapshot is stored
	// in, and sent in (one chunk per message).
	SnapshotChunkBytes = 256 << 10
	// MaxSnapshotBytes bounds what a stored snapshot's metadata may claim
	// (a sanity check against corrupt metadata, far beyond what fits in a
	// replica's memory); nothing on the way limits a snapshot below it.
	MaxSnapshotBytes = 64 << 30
)

var (
	keyLogPrefix  = []byte("l/")
	keySnapPrefix = []byte("s/")
	keySnapMeta   = []byte("m/snapshot")
	// A snapshot being received: its chunks and its progress.
	keyStagePrefix = []byte("t/")
	keyStageMeta   = []byte("m/staged")
)

// LayoutVersion is the format version of the data directory this release
// writes and the newest it opens: the keys above and the encodings of
// their values (vrstore.go). A directory from before versions has no
// m/layout record and is version 1 as it stands; OpenStorage records the
// version in every directory it opens. A directory of a newer version is
// refused (LayoutError) before anything in it is read or changed.
const LayoutVersion = 1

// metaLayout is the metadata name of the layout version record.
const metaLayout = "layout"

// LayoutError is OpenStorage's refusal of a data directory whose format
// version this release does not open.
type LayoutError struct {
	Found, Newest int
}

func (e *LayoutError) Error() string {
	return fmt.Sprintf("data directory format version %d is newer than version %d, the newest this chubbyd opens: "+
		"it was written by a newer release; run that release (or a later one)", e.Found, e.Newest)
}

// checkLayout refuses a directory of a newer layout and records the
// version in one that has none.
func (s *Storage) checkLayout() error {
	b, err := s.GetMeta(metaLayout)
	if err != nil {
		return &OpenError{Dir: s.dir, Reason: "cannot read its format version", Err: err, Action: keepDirAction}
	}
	if b == nil {
		return s.SetMeta(metaLayout, []byte(strconv.Itoa(LayoutVersion)))
	}
	v, err := strconv.Atoi(string(b))
	if err != nil || v < 1 {
		return &OpenError{Dir: s.dir, Reason: fmt.Sprintf("its format version record %q is not a version", b), Err: ErrCorrupt,
			Action: "OpenStorage changed nothing. " + keepDirAction}
	}
	if v > LayoutVersion {
		return &OpenError{Dir: s.dir, Reason: "refused", Err: &LayoutError{Found: v, Newest: LayoutVersion},
			Action: "OpenStorage changed nothing"}
	}
	return nil
}

// ErrNoSnapshot: the snapshot asked for is not the one stored (a newer
// one replaced it, or there is none).
var ErrNoSnapshot = errors.New("replica storage: no such snapshot")

// ErrNoChunk: a chunk number past the snapshot's last chunk.
var ErrNoChunk = errors.New("replica storage: no such snapshot chunk")

// ErrCorrupt reports stored data that fails its checks.
var ErrCorrupt = errors.New("replica storage: corrupt data")

// DefaultStorageOptions returns the defaults OpenStorage gives the fields
// left at zero: on disk, MemTableSize 16 MiB, Logger slog.Default().
func DefaultStorageOptions() StorageOptions {
	return StorageOptions{MemTableSize: 16 << 20, Logger: slog.Default()}
}

// OpenStorage opens (creating if needed) the storage in dir.
func OpenStorage(dir string, o StorageOptions) (*Storage, error) {
	def := DefaultStorageOptions()
	if o.MemTableSize == 0 {
		o.MemTableSize = def.MemTableSize
	}
	if o.Logger == nil {
		o.Logger = def.Logger
	}
	opts := badger.DefaultOptions(dir).
		WithInMemory(o.InMemory).
		WithSyncWrites(false). // we fsync once per batch ourselves
		WithMemTableSize(o.MemTableSize).
		WithNumMemtables(2).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(8).
		WithBaseTableSize(2 << 20).
		WithValueLogFileSize(64 << 20).
		WithValueThreshold(64 << 10).
		WithCompression(options.None). // compression would need a block cache; entries are small
		WithBlockCacheSize(0).
		WithIndexCacheSize(0).
		WithNumCompactors(2).
		WithLogger(badgerLogger{o.Logger}).
		WithMetricsEnabled(false)
	if o.InMemory {
		// In memory Badger has no value log: a value must fit under the
		// threshold, at most 1 MiB. (On disk, values over 64 KiB go to the
		// value log.) So an in-memory store holds entries of up to about
		// 1 MiB, not quite MaxEntryBytes with its envelope: it is for tests.
		opts = opts.WithDir("").WithValueDir("").WithValueThreshold(1 << 20)
	}
	if !o.InMemory {
		if err := recoverLeftovers(dir, o.Logger); err != nil {
			return nil, err
		}
	}
	db, err := badger.Open(opts)
	if err != nil {
		return nil, &OpenError{Dir: dir, Reason: "Badger cannot open it", Err: err,
			Action: "OpenStorage changed nothing but the leftovers it logged. " + keepDirAction}
	}
	s := &Storage{db: db, log: o.Logger, dir: dir}
	if err := s.checkLayout(); err != nil {
		db.Close()
		return nil, err
	}
	if err := s.load(); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// OpenError is OpenStorage refusing a directory: it names the directory,
// the file at fault when one is known, why, and what the operator can do.
// Err is the cause (ErrInUse, ErrCorrupt or Badger's error, for errors.Is).
type OpenError struct {
	Dir    string
	File   string // "" when no one file is known to be at fault
	Reason string
	Action string
	Err    error
}

func (e *OpenError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "replica storage %q: ", e.Dir)
	if e.File != "" {
		fmt.Fprintf(&b, "%s: ", e.File)
	}
	b.WriteString(e.Reason)
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	if e.Action != "" {
		b.WriteString(". " + e.Action)
	}
	return b.String()
}

func (e *OpenError) Unwrap() error { return e.Err }

// ErrCommittedLost: entries the hard state says are committed are not in
// the log. A correct disk never does this; Badger v4.9.6 does when a
// compaction cannot create an output table (a failing or full disk): it
// commits the compaction without that table. The entries are still on the
// cell's other replicas, but this replica cannot take part with the log
// it has.
var ErrCommittedLost = fmt.Errorf("%w: committed log entries lost", ErrCorrupt)

// ErrInUse: another process, or a Storage of this process that has not
// finished closing (see ErrCloseTimeout), holds the directory's lock.
var ErrInUse = errors.New("replica storage: directory in use")

// keepDirAction is what the operator can do with a directory OpenStorage
// cannot open safely.
const keepDirAction = "Do not delete or edit files in it by hand: they may hold entries this replica " +
	"acknowledged, and a replica that forgets what it acknowledged can undo a commit. Keep the directory " +
	"as it is for diagnosis (copy it elsewhere before any repair); the cell goes on without this replica " +
	"while a majority of the others run"

// badgerLogHeader is the header Badger puts at the start of a memtable's
// WAL (*.mem) and of a value log (*.vlog) when it creates one: the 8-byte
// encryption key id and the 12-byte base IV (vlogHeaderSize and
// logFile.bootstrap in Badger's memtable.go). Entries follow it.
const badgerLogHeader = 20

// recoverLeftovers repairs, before Badger opens dir, the files a failed
// disk leaves that Badger cannot open but that provably hold nothing.
//
// Badger creates a WAL or a value log in logFile.open, through
// z.OpenMmapFile (ristretto's z/file.go): open(O_CREATE), then ftruncate to
// the file's whole size (2*MemTableSize, 2*ValueLogFileSize), then the
// header is written into the mapping. When the ftruncate fails (EFBIG past
// the file-size limit, EIO) the file stays at 0 bytes (the descriptor is
// not even closed), and the write that needed the file fails:
// ensureRoomForWrite's newMemTable when a memtable is full,
// createVlogFile when a value log is full or at open. A 0-byte file is also
// left by a crash between the truncate to 0 and the unlink of
// MmapFile.Delete (a flushed memtable, a collected value log). Entries
// start after the header, and an entry that was synced (msync, an
// fdatasync of its range) has the file's size synced with it: a 0-byte
// file never held an acknowledged entry. But Badger opens an existing
// 0-byte file as a new one: z.OpenMmapFile sizes it and returns z.NewFile,
// and openMemTables and valueLog.open take that for an error ("while
// opening fid: 2: Create a new file"), so the replica could not restart.
//
// So, under Badger's lock:
//   - a 0-byte *.mem is removed: no other file refers to a memtable by its
//     number (they are replayed in number order, and the next is numbered
//     after the highest);
//   - a 0-byte *.vlog below the highest is removed, as Badger removes the
//     empty ones below the highest itself (valueLog.open);
//   - the highest *.vlog, at 0 bytes, gets its header and so becomes what
//     Badger's Close leaves of an unused value log: removed, its number
//     would be given to the next value log, and a value pointer into the
//     lost file (possible only if a crash lost its size but kept a synced
//     WAL naming it) would read the new file's bytes instead of failing;
//   - a *.mem or *.vlog shorter than its header but not empty is refused:
//     Badger never leaves one, so something damaged it.
//
// Every repair is logged at Warn.
func recoverLeftovers(dir string, log *slog.Logger) error {
	if !lockDirSupported {
		return nil
	}
	lock, inUse, err := lockDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil // a new replica: Badger creates the directory
	case inUse:
		return &OpenError{Dir: dir, Reason: "another process, or a Storage of this process still closing, holds its lock",
			Err:    fmt.Errorf("%w: %w", ErrInUse, err),
			Action: "Stop the other replica process using this directory, or wait for it to exit, and start again"}
	case err != nil:
		return &OpenError{Dir: dir, Reason: "cannot lock it", Err: err, Action: keepDirAction}
	}
	defer lock.Close() // releases the lock
	ents, err := lock.ReadDir(-1)
	if err != nil {
		return &OpenError{Dir: dir, Reason: "cannot list it", Err: err, Action: keepDirAction}
	}
	type logFile struct {
		name string
		size int64
		fid  uint64
	}
	var mems, vlogs []logFile
	for _, e := range ents {
		name := e.Name()
		ext := filepath.Ext(name)
		if ext != ".mem" && ext != ".vlog" || !e.Type().IsRegular() {
			continue
		}
		fid, err := strconv.ParseUint(strings.TrimSuffix(name, ext), 10, 32)
		if err != nil {
			continue // not Badger's name: Badger says so when it opens
		}
		fi, err := e.Info()
		if err != nil {
			return &OpenError{Dir: dir, File: name, Reason: "cannot stat it", Err: err, Action: keepDirAction}
		}
		f := logFile{name, fi.Size(), fid}
		if f.size > 0 && f.size < badgerLogHeader {
			return &OpenError{Dir: dir, File: name,
				Reason: fmt.Sprintf("%d bytes, shorter than the %d-byte header Badger writes when it creates the file: "+
					"Badger never leaves such a file, so something else truncated or damaged it, and it may have held acknowledged entries",
					f.size, badgerLogHeader),
				Err: ErrCorrupt, Action: keepDirAction}
		}
		if ext == ".mem" {
			mems = append(mems, f)
		} else {
			vlogs = append(vlogs, f)
		}
	}
	var highest uint64
	for _, f := range vlogs {
		highest = max(highest, f.fid)
	}
	changed := false
	remove := func(f logFile, why string) error {
		if err := os.Remove(filepath.Join(dir, f.name)); err != nil {
			return &OpenError{Dir: dir, File: f.name, Reason: "cannot remove this empty leftover of a failed write", Err: err,
				Action: "Make the directory writable and start again"}
		}
		changed = true
		log.Warn("storage: removed an empty file a failed disk write left (it held nothing)", "dir", dir, "file", f.name, "why", why)
		return nil
	}
	for _, f := range mems {
		if f.size == 0 {
			if err := remove(f, "0-byte memtable WAL: Badger could not size it when it created it, or crashed deleting it after a flush"); err != nil {
				return err
			}
		}
	}
	for _, f := range vlogs {
		switch {
		case f.size != 0:
		case f.fid != highest:
			if err := remove(f, "0-byte value log below the highest: Badger could not size it when it created it, or crashed deleting it"); err != nil {
				return err
			}
		default:
			if err := writeLogHeader(filepath.Join(dir, f.name)); err != nil {
				return &OpenError{Dir: dir, File: f.name, Reason: "cannot write the header of this empty value log", Err: err,
					Action: "Make the directory writable and start again"}
			}
			changed = true
			log.Warn("storage: gave an empty value log a failed disk write left its header (it held nothing; it keeps its number so that no later file reuses it)",
				"dir", dir, "file", f.name)
		}
	}
	if changed {
		if err := lock.Sync(); err != nil {
			return &OpenError{Dir: dir, Reason: "cannot sync it after removing leftovers", Err: err, Action: keepDirAction}
		}
	}
	return nil
}

// writeLogHeader writes, durably, the header logFile.bootstrap writes in
// a new unencrypted log file (OpenStorage sets no encryption key): key id
// 0, a random base IV.
func writeLogHeader(path string) error {
	hdr := make([]byte, badgerLogHeader)
	if _, err := crand.Read(hdr[8:]); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.Write(hdr); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// load finds the bounds of the log. Entries must be contiguous after the
// snapshot; anything after a gap is deleted, because it is what an
// interrupted truncation (TruncateFrom, persistReady's) left: an entry is
// acknowledged only after its whole batch and everything before it are
// synced, and a truncation deletes in index order. But a truncation never
// reaches a committed entry, so if the contiguous log stops short of the
// commit number of the hard state, committed entries were lost under the
// log (Badger v4.9.6 as released lost whole tables when a compaction could
// not create one; it drops a table that fails its checksum at open), and
// load refuses the directory without deleting anything.
func (s *Storage) load() error {
	snapRec, err := s.snapshotMeta()
	snapIdx := snapRec.Index
	if err != nil {
		return err
	}
	hsb, err := s.GetMeta(metaHardState)
	if err != nil {
		return err
	}
	hs, err := decodeHardState(hsb)
	if err != nil {
		return err
	}
	s.first, s.last = snapIdx+1, snapIdx
	var stale [][]byte
	var afterGap, firstAfterGap, lastAfterGap uint64
	err = s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: keyLogPrefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			idx, ok := parseLogKey(it.Item().Key())
			if !ok {
				return fmt.Errorf("%w: log key %q", ErrCorrupt, it.Item().Key())
			}
			switch {
			case idx <= snapIdx:
				stale = append(stale, it.Item().KeyCopy(nil)) // truncation was interrupted
			case idx == s.last+1 && afterGap == 0:
				s.last = idx
			default:
				stale = append(stale, it.Item().KeyCopy(nil)) // after a gap: never acknowledged
				if afterGap == 0 {
					firstAfterGap = idx
				}
				afterGap++
				lastAfterGap = idx
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("scan log: %w", err)
	}
	if hs.Commit > snapIdx && hs.Commit > s.last {
		var found string
		switch {
		case s.last < s.first && afterGap == 0:
			found = "no entry"
		case s.last < s.first:
			found = fmt.Sprintf("no entry from %d on but %d entries in [%d,%d]", s.first, afterGap, firstAfterGap, lastAfterGap)
		case afterGap == 0:
			found = fmt.Sprintf("entries [%d,%d]", s.first, s.last)
		default:
			found = fmt.Sprintf("entries [%d,%d] and %d more in [%d,%d]", s.first, s.last, afterGap, firstAfterGap, lastAfterGap)
		}
		return &OpenError{Dir: s.dir,
			Reason: fmt.Sprintf("committed log entries are missing: the hard state says entries up to %d are committed, "+
				"and after the snapshot at %d the log holds %s", hs.Commit, snapIdx, found),
			Err:    ErrCommittedLost,
			Action: "OpenStorage deleted nothing. " + keepDirAction}
	}
	if len(stale) > 0 {
		if afterGap > 0 {
			s.log.Warn("storage: removing the log entries after a gap (what an interrupted truncation left)",
				"count", afterGap, "from", firstAfterGap, "to", lastAfterGap, "last", s.last)
		}
		s.log.Info("storage: removing log entries outside the contiguous log", "count", len(stale))
		if err := s.deleteKeys(stale, 0); err != nil {
			return err
		}
	}
	return nil
}

// closeWait bounds Close. Badger flushes its memtable when it closes and
// retries a failed flush forever; a replica must still stop. Everything
// acknowledged was fsynced, so leaving Badger mid-close loses nothing: the
// next open recovers as after a crash.
const closeWait = 10 * time.Second

// ErrCloseTimeout: the database did not close within closeWait and was
// left closing in the background.
var ErrCloseTimeout = errors.New("replica storage: Badger did not close in time; left closing (nothing acknowledged is lost)")

// Close closes the database, waiting at most closeWait.
func (s *Storage) Close() error {
	done := make(chan error, 1)
	go func() { done <- s.db.Close() }()
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		s.log.Error("storage: Badger did not close in time; leaving it (everything acknowledged is fsynced; the next open recovers as after a crash)", "wait", closeWait)
		return ErrCloseTimeout
	}
}

// Bounds returns the first and last index of the log on disk. last < first
// means the log is empty (everything is in the snapshot).
func (s *Storage) Bounds() (first, last uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first, s.last
}

// TruncateFrom deletes the log entries with index >= from, durably, so
// that the next entry written is at from. The replicated log uses it when a
// replica's unverified suffix differs from the primary's log. Entries the
// snapshot covers cannot be truncated (from must be after the snapshot);
// from past the last entry changes nothing.
func (s *Storage) TruncateFrom(from uint64) error {
	first, last := s.Bounds()
	if from < first {
		return fmt.Errorf("truncate from %d: entries before %d are in the snapshot", from, first)
	}
	if from > last {
		return nil
	}
	keys := make([][]byte, 0, last-from+1)
	for i := from; i <= last; i++ {
		keys = append(keys, logKey(i))
	}
	if err := s.deleteKeys(keys, 0); err != nil {
		return fmt.Errorf("truncate from %d: %w", from, err)
	}
	if err := s.db.Sync(); err != nil {
		return fmt.Errorf("truncate from %d: sync: %w", from, err)
	}
	s.mu.Lock()
	s.last = from - 1
	s.mu.Unlock()
	return nil
}

// Entries returns the entries in [from, to], which must lie inside Bounds.
func (s *Storage) Entries(from, to uint64) ([][]byte, error) {
	first, last := s.Bounds()
	if from < first || to > last || from > to {
		return nil, fmt.Errorf("entries [%d,%d] outside the log [%d,%d]", from, to, first, last)
	}
	out := make([][]byte, 0, to-from+1)
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: keyLogPrefix, PrefetchValues: true, PrefetchSize: 64})
		defer it.Close()
		want := from
		for it.Seek(logKey(from)); it.Valid() && want <= to; it.Next() {
			idx, ok := parseLogKey(it.Item().Key())
			if !ok || idx != want {
				return fmt.Errorf("%w: expected entry %d, found key %q", ErrCorrupt, want, it.Item().Key())
			}
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			out = append(out, v)
			want++
		}
		if want != to+1 {
			return fmt.Errorf("%w: log ends at %d, expected %d", ErrCorrupt, want-1, to)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read entries: %w", err)
	}
	return out, nil
}

// SaveSnapshot stores data as the state after applying every entry up to
// index, then drops the log entries it covers and the older snapshot. The
// new snapshot is durable before anything old is removed.
func (s *Storage) SaveSnapshot(index uint64, data []byte) error {
	return s.storeSnapshot(index, [][]byte{data}, false)
}

// InstallSnapshot stores data, a snapshot received from another replica,
// as the state after index, and drops the whole log: the log continues
// after index. The replicated log uses it to catch up a replica whose
// missing entries were compacted away elsewhere; index may lie beyond this
// log's end, and the entries after it are dropped because they are not the
// snapshot's (the caller installs only over a log that lacks or differs at
// index). A crash leaves either the old snapshot with a prefix of the old
// log, or the new snapshot with no log.
func (s *Storage) InstallSnapshot(index uint64, data []byte) error {
	return s.storeSnapshot(index, [][]byte{data}, true)
}

// storeSnapshot is SaveSnapshot (replaceLog false) and InstallSnapshot
// (true) of the concatenation of parts, which it does not make: a
// snapshot is the protocol's envelope and the application's bytes, and
// joining hundreds of megabytes doubled the memory a save takes.
func (s *Storage) storeSnapshot(index uint64, parts [][]byte, replaceLog bool) error {
	first, last := s.Bounds()
	switch {
	case !replaceLog && index > last:
		return fmt.Errorf("snapshot at %d beyond the log end %d", index, last)
	case replaceLog && index+1 < first:
		return fmt.Errorf("install snapshot at %d: older than the current one at %d", index, first-1)
	}
	return s.saveSnapshotParts(index, parts, replaceLog)
}

// snapRecord is a snapshot's metadata record: where its chunks are (under
// keySnapPrefix, or keyStagePrefix for one received in chunks and
// installed as it was staged) and what they hold.
type snapRecord struct {
	ChunkInfo
	staged bool // chunks under keyStagePrefix
}

func (r snapRecord) key(c uint32) []byte {
	if r.staged {
		return stageKey(r.Index, c)
	}
	return snapKey(r.Index, c)
}

func (s *Storage) saveSnapshotParts(index uint64, parts [][]byte, replaceLog bool) error {
	total := 0
	for _, p := range parts {
		total += len(p)
	}
	if int64(total) > MaxSnapshotBytes {
		return fmt.Errorf("snapshot of %d bytes over the %d limit", total, int64(MaxSnapshotBytes))
	}
	old, err := s.snapshotMeta()
	if err != nil {
		return err
	}
	if index <= old.Index && old.Chunks > 0 && !replaceLog {
		return nil // we already have this or a newer one
	}
	if index == old.Index && old.Chunks > 0 {
		return s.TruncateFrom(index + 1) // the same snapshot: only the log goes
	}
	// In transactions of snapshotWriteChunks chunks, one after the other:
	// Badger carries out writes in order through one writer, and one
	// batch of a 600 MB snapshot held the log appends queued behind it
	// for seconds (long enough for the primary to lose its quorum).
	chunks := uint32(0)
	sum := uint32(0)
	var group [][]byte
	write := func() error {
		first := chunks - uint32(len(group))
		err := s.db.Update(func(txn *badger.Txn) error {
			for i, c := range group {
				if err := txn.Set(snapKey(index, first+uint32(i)), c); err != nil {
					return err
				}
			}
			return nil
		})
		group = group[:0]
		return err
	}
	for c := range chunksOf(parts, SnapshotChunkBytes) {
		group = append(group, c)
		sum = crc32.Update(sum, castagnoli, c)
		chunks++
		if len(group) == snapshotWriteChunks {
			if err := write(); err != nil {
				return fmt.Errorf("save snapshot: %w", err)
			}
		}
	}
	if len(group) > 0 {
		if err := write(); err != nil {
			return fmt.Errorf("save snapshot: %w", err)
		}
	}
	if err := s.db.Sync(); err != nil {
		return fmt.Errorf("save snapshot: sync: %w", err)
	}
	rec := snapRecord{ChunkInfo: ChunkInfo{Index: index, Chunks: chunks, Length: uint64(total), Sum: sum}}
	return s.switchSnapshot(old, rec, replaceLog, nil)
}

// snapshotWriteChunks is how many chunks (2 MiB) one transaction of a
// snapshot save writes.
const snapshotWriteChunks = 8

// chunksOf yields the concatenation of parts in pieces of size bytes (the
// last one shorter, and one empty piece for nothing at all); a piece that
// spans two parts is a copy, the others are slices of the parts.
func chunksOf(parts [][]byte, size int) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		var buf []byte
		yielded := false
		for _, p := range parts {
			for len(p) > 0 {
				if len(buf) == 0 && len(p) >= size {
					if !yield(p[:size]) {
						return
					}
					yielded, p = true, p[size:]
					continue
				}
				n := min(size-len(buf), len(p))
				buf, p = append(buf, p[:n]...), p[n:]
				if len(buf) == size {
					if !yield(buf) {
						return
					}
					yielded, buf = true, nil
				}
			}
		}
		if len(buf) > 0 || !yielded {
			yield(buf)
		}
	}
}

// switchSnapshot makes rec, whose chunks are durable, the current
// snapshot: with replaceLog the log after it goes first (while the old
// snapshot still rules, a crash leaves a prefix of the old log); then the
// metadata record is written and synced, with more in the same
// transaction; then the old snapshot's chunks and the covered log are
// garbage.
func (s *Storage) switchSnapshot(old, rec snapRecord, replaceLog bool, more func(*badger.Txn) error) error {
	index := rec.Index
	if replaceLog {
		if err := s.TruncateFrom(index + 1); err != nil {
			return fmt.Errorf("install snapshot: %w", err)
		}
	}
	meta := make([]byte, 8+4+8+4, 8+4+8+4+1)
	binary.BigEndian.PutUint64(meta[0:], index)
	binary.BigEndian.PutUint32(meta[8:], rec.Chunks)
	binary.BigEndian.PutUint64(meta[12:], rec.Length)
	binary.BigEndian.PutUint32(meta[20:], rec.Sum)
	if rec.staged {
		meta = append(meta, 't')
	}
	err := s.db.Update(func(txn *badger.Txn) error {
		if err := txn.Set(keySnapMeta, meta); err != nil {
			return err
		}
		if more != nil {
			return more(txn)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("save snapshot meta: %w", err)
	}
	if err := s.db.Sync(); err != nil {
		return fmt.Errorf("save snapshot meta: sync: %w", err)
	}
	// Now the old snapshot and the covered log prefix are garbage.
	var garbage [][]byte
	if old.Chunks > 0 && (old.Index != index || old.staged != rec.staged) {
		for c := uint32(0); c < old.Chunks; c++ {
			garbage = append(garbage, old.key(c))
		}
	}
	s.mu.Lock()
	for i := s.first; i <= index && i <= s.last; i++ {
		garbage = append(garbage, logKey(i)) // covered: load drops them too if we crash first
	}
	if index >= s.first {
		s.first = index + 1
	}
	if s.last < index {
		s.last = index
	}
	s.mu.Unlock()
	return s.deleteKeys(garbage, garbagePause)
}

// LoadSnapshot returns the latest snapshot and its index; ok is false when
// there is none.
func (s *Storage) LoadSnapshot() (index uint64, data []byte, ok bool, err error) {
	// One read transaction: a snapshot being saved meanwhile (off the
	// replica's loop) deletes the old chunks only after its metadata.
	err = s.db.View(func(txn *badger.Txn) error {
		rec, err := readSnapMeta(txn)
		if err != nil || rec.Chunks == 0 {
			return err
		}
		buf := make([]byte, 0, rec.Length)
		for c := uint32(0); c < rec.Chunks; c++ {
			item, err := txn.Get(rec.key(c))
			if err != nil {
				return fmt.Errorf("%w: snapshot %d chunk %d: %v", ErrCorrupt, rec.Index, c, err)
			}
			if err := item.Value(func(v []byte) error {
				buf = append(buf, v...)
				return nil
			}); err != nil {
				return err
			}
		}
		if uint64(len(buf)) != rec.Length || crc32.Checksum(buf, castagnoli) != rec.Sum {
			return fmt.Errorf("%w: snapshot %d fails its length or checksum", ErrCorrupt, rec.Index)
		}
		index, data, ok = rec.Index, buf, true
		return nil
	})
	if err != nil {
		return 0, nil, false, err
	}
	return index, data, ok, nil
}

// ReadSnapshotChunk returns chunk n of the current snapshot, which must be
// the one at index, and its description.
func (s *Storage) ReadSnapshotChunk(index uint64, n uint32) (data []byte, info ChunkInfo, err error) {
	err = s.db.View(func(txn *badger.Txn) error {
		rec, err := readSnapMeta(txn)
		if err != nil {
			return err
		}
		if rec.Chunks == 0 || rec.Index != index {
			return fmt.Errorf("%w at %d (the current one is at %d)", ErrNoSnapshot, index, rec.Index)
		}
		if n >= rec.Chunks {
			return fmt.Errorf("%w: snapshot %d has %d chunks, not %d", ErrNoChunk, index, rec.Chunks, n+1)
		}
		item, err := txn.Get(rec.key(n))
		if err != nil {
			return fmt.Errorf("%w: snapshot %d chunk %d: %v", ErrCorrupt, index, n, err)
		}
		data, err = item.ValueCopy(nil)
		info = rec.ChunkInfo
		return err
	})
	return data, info, err
}

func (s *Storage) snapshotMeta() (rec snapRecord, err error) {
	err = s.db.View(func(txn *badger.Txn) error {
		rec, err = readSnapMeta(txn)
		return err
	})
	return
}

// readSnapMeta reads the current snapshot's metadata; Chunks is 0 when
// there is none.
func readSnapMeta(txn *badger.Txn) (rec snapRecord, err error) {
	item, err := txn.Get(keySnapMeta)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return rec, nil
	}
	if err != nil {
		return rec, err
	}
	err = item.Value(func(v []byte) error {
		if len(v) != 24 && (len(v) != 25 || v[24] != 't') {
			return fmt.Errorf("%w: snapshot meta of %d bytes", ErrCorrupt, len(v))
		}
		rec.Index = binary.BigEndian.Uint64(v[0:])
		rec.Chunks = binary.BigEndian.Uint32(v[8:])
		rec.Length = binary.BigEndian.Uint64(v[12:])
		rec.Sum = binary.BigEndian.Uint32(v[20:])
		rec.staged = len(v) == 25
		if rec.Length > MaxSnapshotBytes || rec.Length > uint64(rec.Chunks)*MaxSnapshotChunkBytes {
			return fmt.Errorf("%w: snapshot meta: %d bytes in %d chunks", ErrCorrupt, rec.Length, rec.Chunks)
		}
		return nil
	})
	return rec, err
}

// GetMeta returns a named value, or nil when it was never stored.
func (s *Storage) GetMeta(name string) ([]byte, error) {
	var out []byte
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(metaKey(name))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		out, err = item.ValueCopy(nil)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get meta %s: %w", name, err)
	}
	return out, nil
}

// SetMeta stores a named value durably (fsync), beside the log: what the
// cell keeps about the replica itself, such as its identity.
func (s *Storage) SetMeta(name string, value []byte) error {
	if err := s.db.Update(func(txn *badger.Txn) error { return txn.Set(metaKey(name), value) }); err != nil {
		return fmt.Errorf("set meta %s: %w", name, err)
	}
	if err := s.db.Sync(); err != nil {
		return fmt.Errorf("set meta %s: sync: %w", name, err)
	}
	return nil
}

// Empty reports whether the replica has nothing of a log: no entry, no
// snapshot, no hard state (a replica that was never part of a cell).
func (s *Storage) Empty() (bool, error) {
	first, last := s.Bounds()
	if last >= first && last > 0 {
		return false, nil
	}
	if rec, err := s.snapshotMeta(); err != nil || rec.Chunks > 0 {
		return false, err
	}
	hs, err := s.GetMeta(metaHardState)
	return hs == nil, err
}

// deleteBatch bounds the keys deleted in one write batch. Badger applies
// a batch's writes in order through one writer: a snapshot's 50,000
// covered log keys in one go held every log append queued behind them for
// a hundred milliseconds and more; in batches of this size appends slip in
// between.
const deleteBatch = 1024

// garbagePause is the pause between two batches of garbage (the log a new
// snapshot covers, the old snapshot): nothing waits for it to go, and
// deleting 50,000 keys at full speed on five replicas at once took the
// disk and the CPU from the commits for a few hundred milliseconds.
const garbagePause = 5 * time.Millisecond

// deleteKeys deletes keys (not synced: every caller either syncs after or
// deletes what load would drop anyway), deleteBatch at a time, pausing
// pause between batches.
func (s *Storage) deleteKeys(keys [][]byte, pause time.Duration) error {
	for len(keys) > 0 {
		n := min(len(keys), deleteBatch)
		wb := s.db.NewWriteBatch()
		for _, k := range keys[:n] {
			if err := wb.Delete(k); err != nil {
				wb.Cancel()
				return fmt.Errorf("delete: %w", err)
			}
		}
		if err := wb.Flush(); err != nil {
			return fmt.Errorf("delete: %w", err)
		}
		keys = keys[n:]
		if len(keys) > 0 && pause > 0 {
			time.Sleep(pause)
		}
	}
	return nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func logKey(i uint64) []byte {
	k := make([]byte, len(keyLogPrefix)+8)
	copy(k, keyLogPrefix)
	binary.BigEndian.PutUint64(k[len(keyLogPrefix):], i)
	return k
}

func parseLogKey(k []byte) (uint64, bool) {
	if !bytes.HasPrefix(k, keyLogPrefix) || len(k) != len(keyLogPrefix)+8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(k[len(keyLogPrefix):]), true
}

func snapKey(index uint64, chunk uint32) []byte {
	k := make([]byte, len(keySnapPrefix)+8+1+4)
	n := copy(k, keySnapPrefix)
	binary.BigEndian.PutUint64(k[n:], index)
	k[n+8] = '/'
	binary.BigEndian.PutUint32(k[n+9:], chunk)
	return k
}

func stageKey(index uint64, chunk uint32) []byte {
	k := snapKey(index, chunk)
	copy(k, keyStagePrefix)
	return k
}

func metaKey(name string) []byte { return []byte("m/" + name) }

// badgerLogger routes Badger's logs to slog, at Debug for its chatter.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any)   { b.l.Error("badger: " + fmt.Sprintf(f, a...)) }
func (b badgerLogger) Warningf(f string, a ...any) { b.l.Warn("badger: " + fmt.Sprintf(f, a...)) }
func (b badgerLogger) Infof(f string, a ...any)    { b.l.Debug("badger: " + fmt.Sprintf(f, a...)) }
func (b badgerLogger) Debugf(f string, a ...any)   { b.l.Debug("badger: " + fmt.Sprintf(f, a...)) }
