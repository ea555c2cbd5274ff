//go:build unix

package replica

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/chubbygo/chubby/replica/vr"
)

// What a failed disk leaves in a Storage directory, made by hand: OpenStorage
// removes or completes what provably holds nothing, refuses what it cannot
// vouch for, and never touches a directory in use.

// recoverTestDir is a directory with entries 1..n written through
// persistReady (hard state commit n), closed cleanly. Entry 2 is 100 KiB, so
// that it lives in the value log.
func recoverTestDir(t *testing.T, n uint64) string {
	t.Helper()
	dir := t.TempDir()
	st, err := OpenStorage(dir, StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= n; i++ {
		e := vr.Entry{Index: i, View: 1, Type: vr.EntryCommand, Data: recoverTestData(i)}
		if err := st.persistReady(0, []vr.Entry{e}, &vr.HardState{View: 1, LastNormalView: 1, Commit: i}, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func recoverTestData(i uint64) []byte {
	if i == 2 {
		return bytes.Repeat([]byte{'v'}, 100<<10)
	}
	return fmt.Appendf(nil, "entry %d", i)
}

// checkRecoverTestLog opens dir and checks it holds entries 1..n intact.
func checkRecoverTestLog(t *testing.T, dir string, n uint64, o StorageOptions) {
	t.Helper()
	st, err := OpenStorage(dir, o)
	if err != nil {
		t.Fatalf("open: %v\nfiles:\n%s", err, dirListing(dir))
	}
	defer st.Close()
	if first, last := st.Bounds(); first != 1 || last != n {
		t.Fatalf("log [%d,%d], want [1,%d]", first, last, n)
	}
	p, _, err := st.loadVR()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range p.Entries {
		if !bytes.Equal(e.Data, recoverTestData(e.Index)) {
			t.Fatalf("entry %d: %d bytes, not what was written", e.Index, len(e.Data))
		}
	}
}

// dirListing names dir's files and their sizes, for failure messages.
func dirListing(dir string) string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range ents {
		if fi, err := e.Info(); err == nil {
			fmt.Fprintf(&b, "  %-16s %10d\n", e.Name(), fi.Size())
		}
	}
	return b.String()
}

func touch(t *testing.T, path string, content []byte) {
	t.Helper()
	if err := os.WriteFile(path, content, 0o644); err != nil {
		t.Fatal(err)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// warnLog is a logger that records Warn and above.
func warnLog() (*slog.Logger, *bytes.Buffer) {
	var b bytes.Buffer
	return slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelWarn})), &b
}

func TestStorageOpenRemovesEmptyMemtables(t *testing.T) {
	dir := recoverTestDir(t, 5)
	// What ensureRoomForWrite's failed newMemTable leaves (the highest
	// number), and what a crash inside MmapFile.Delete leaves (any number).
	for _, name := range []string{"00001.mem", "00009.mem"} {
		touch(t, filepath.Join(dir, name), nil)
	}
	log, warns := warnLog()
	checkRecoverTestLog(t, dir, 5, StorageOptions{Logger: log})
	for _, name := range []string{"00001.mem", "00009.mem"} {
		if exists(filepath.Join(dir, name)) {
			// Badger may have made a new memtable with that number since:
			// then it is not empty.
			if fi, _ := os.Stat(filepath.Join(dir, name)); fi.Size() == 0 {
				t.Errorf("%s is still there, empty", name)
			}
		}
		if !strings.Contains(warns.String(), "file="+name) {
			t.Errorf("no warning names %s; logged:\n%s", name, warns)
		}
	}
	// And the storage goes on: more entries, another reopen.
	st, err := OpenStorage(dir, StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.persistReady(0, []vr.Entry{{Index: 6, View: 1, Type: vr.EntryCommand, Data: recoverTestData(6)}},
		&vr.HardState{View: 1, LastNormalView: 1, Commit: 6}, true); err != nil {
		t.Fatal(err)
	}
	st.Close()
	checkRecoverTestLog(t, dir, 6, StorageOptions{})
}

func TestStorageOpenRepairsEmptyValueLogs(t *testing.T) {
	dir := recoverTestDir(t, 5)
	vlogs, _ := filepath.Glob(filepath.Join(dir, "*.vlog"))
	if len(vlogs) == 0 {
		t.Fatalf("no value log in\n%s", dirListing(dir))
	}
	// A 0-byte value log below the highest (a collected one whose unlink
	// a crash prevented) and the highest, 0 bytes (createVlogFile could
	// not size it).
	below, highest := filepath.Join(dir, "000007.vlog"), filepath.Join(dir, "000008.vlog")
	touch(t, below, nil)
	touch(t, highest, nil)
	log, warns := warnLog()
	checkRecoverTestLog(t, dir, 5, StorageOptions{Logger: log})
	if exists(below) {
		t.Errorf("the empty value log below the highest is still there")
	}
	// The highest keeps its number (Badger starts the next value log
	// after it) and holds a header and nothing else.
	if fi, err := os.Stat(highest); err != nil || fi.Size() != badgerLogHeader {
		t.Errorf("the highest value log: %v, %v; want %d bytes", fi, err, badgerLogHeader)
	}
	if !exists(filepath.Join(dir, "000009.vlog")) {
		t.Errorf("Badger did not start its value log after the repaired one:\n%s", dirListing(dir))
	}
	if !strings.Contains(warns.String(), "file=000007.vlog") || !strings.Contains(warns.String(), "file=000008.vlog") {
		t.Errorf("the repairs are not both logged:\n%s", warns)
	}
	checkRecoverTestLog(t, dir, 5, StorageOptions{})
}

func TestStorageOpenRefusesTruncatedLogFile(t *testing.T) {
	for _, name := range []string{"00004.mem", "000004.vlog"} {
		t.Run(name, func(t *testing.T) {
			dir := recoverTestDir(t, 3)
			path := filepath.Join(dir, name)
			touch(t, path, []byte("7 bytes")) // shorter than any header Badger writes
			_, err := OpenStorage(dir, StorageOptions{})
			var oe *OpenError
			if !errors.As(err, &oe) || oe.File != name || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("OpenStorage = %v; want an *OpenError about %s wrapping ErrCorrupt", err, name)
			}
			if fi, err := os.Stat(path); err != nil || fi.Size() != 7 {
				t.Fatalf("the refused file was changed: %v %v", fi, err)
			}
			t.Logf("refused: %v", err)
		})
	}
}

func TestStorageOpenLeavesDirectoryInUseAlone(t *testing.T) {
	dir := recoverTestDir(t, 3)
	st, err := OpenStorage(dir, StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "00099.mem")
	touch(t, empty, nil)
	_, err = OpenStorage(dir, StorageOptions{})
	var oe *OpenError
	if !errors.Is(err, ErrInUse) || !errors.As(err, &oe) {
		t.Fatalf("second OpenStorage = %v; want an *OpenError wrapping ErrInUse", err)
	}
	if !exists(empty) {
		t.Fatal("OpenStorage removed a file in a directory in use")
	}
	if first, last := st.Bounds(); first != 1 || last != 3 {
		t.Fatalf("the open storage changed: [%d,%d]", first, last)
	}
	st.Close()
	checkRecoverTestLog(t, dir, 3, StorageOptions{})
	if exists(empty) {
		t.Fatal("the empty memtable file was not removed once the directory was free")
	}
}

// rawLogKeys counts the log keys in dir, opening Badger directly.
func rawLogKeys(t *testing.T, dir string) []uint64 {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var idx []uint64
	db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: keyLogPrefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			i, _ := parseLogKey(it.Item().Key())
			idx = append(idx, i)
		}
		return nil
	})
	return idx
}

// deleteLogKeys deletes log entries lo..hi under the storage, as a lost
// table or an interrupted truncation does.
func deleteLogKeys(t *testing.T, dir string, lo, hi uint64) {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(txn *badger.Txn) error {
		for i := lo; i <= hi; i++ {
			if err := txn.Delete(logKey(i)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestStorageOpenRefusesMissingCommittedEntries(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lo, hi uint64
	}{
		{"prefix", 1, 4}, // what Badger's compaction lost in the disk-failure test
		{"middle", 4, 6}, // a lost table in the middle
		{"tail", 9, 10},  // the end of the committed log
		{"all", 1, 10},   // everything
		{"one", 10, 10},  // the last committed entry
		{"second", 2, 2}, // the entry in the value log
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := recoverTestDir(t, 10) // commit 10
			deleteLogKeys(t, dir, tc.lo, tc.hi)
			before := rawLogKeys(t, dir)
			_, err := OpenStorage(dir, StorageOptions{})
			var oe *OpenError
			if !errors.As(err, &oe) || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "committed log entries are missing") {
				t.Fatalf("OpenStorage = %v; want an *OpenError about missing committed entries", err)
			}
			t.Logf("refused: %v", err)
			if after := rawLogKeys(t, dir); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Fatalf("OpenStorage deleted entries: %v before, %v after", before, after)
			}
		})
	}
}

// An interrupted truncation above the commit point still opens: what
// follows the gap is dropped, as before.
func TestStorageOpenDropsGapAboveCommit(t *testing.T) {
	dir := t.TempDir()
	st, err := OpenStorage(dir, StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var es []vr.Entry
	for i := uint64(1); i <= 10; i++ {
		es = append(es, vr.Entry{Index: i, View: 1, Type: vr.EntryCommand, Data: recoverTestData(i)})
	}
	if err := st.persistReady(0, es, &vr.HardState{View: 1, LastNormalView: 1, Commit: 5}, true); err != nil {
		t.Fatal(err)
	}
	st.Close()
	deleteLogKeys(t, dir, 7, 8) // TruncateFrom(7) interrupted after two deletes
	checkRecoverTestLog(t, dir, 6, StorageOptions{})
}
