package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/chubbygo/chubby/cell"
	"github.com/chubbygo/chubby/cell/backup"
	"github.com/chubbygo/chubby/cell/celltest"
)

// TestSnapshotSave: snapshot save writes a backup of the cell that
// restores into a cell serving the same files; usage errors exit 2.
func TestSnapshotSave(t *testing.T) {
	c := startCellLease(t, 0)
	want(t, at(t, c.Addr, "", "mkdir", "/cfg"), 0, "", "")
	want(t, at(t, c.Addr, "hello\n", "write", "/cfg/app"), 0, "", "")
	file := filepath.Join(t.TempDir(), "cell.snap")
	r := at(t, c.Addr, "", "snapshot", "save", file)
	want(t, r, 0, "saved the snapshot at log index", "")
	if _, err := os.Stat(file + ".partial"); !os.IsNotExist(err) {
		t.Fatalf("the partial file is left: %v", err)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	h, _, err := backup.Read(f)
	f.Close()
	if err != nil || h.Cell != "local" || !strings.Contains(r.stdout, "("+strconv.FormatInt(h.Length, 10)+" bytes)") {
		t.Fatalf("backup %+v, %v; stdout %q", h, err, r.stdout)
	}

	addr := celltest.FreeAddr(t)
	dir := filepath.Join(t.TempDir(), "restored")
	f, _ = os.Open(file)
	defer f.Close()
	if _, err := cell.Restore(f, cell.RestoreOptions{DataDir: dir, ID: 1, Listen: addr}); err != nil {
		t.Fatal(err)
	}
	rc := celltest.Start(t, celltest.Options{DataDir: dir, Addr: addr})
	want(t, at(t, rc.Addr, "", "cat", "/cfg/app"), 0, "hello", "")

	// --json: one object naming the same snapshot.
	var sj snapshotJSON
	jsonOf(t, c.Addr, "", exitOK, &sj, "snapshot", "save", "--json", file)
	if sj.File != file || sj.LogIndex < h.Index || sj.Bytes <= 0 || sj.ElapsedMs < 0 {
		t.Errorf("snapshot save --json = %+v (the first save: index %d)", sj, h.Index)
	}

	want(t, at(t, c.Addr, "", "snapshot", "save"), exitUsage, "", "exactly one FILE")
	want(t, at(t, c.Addr, "", "snapshot"), exitUsage, "", "save FILE")
	want(t, at(t, c.Addr, "", "snapshot", "save", filepath.Join(t.TempDir(), "no", "such", "dir", "f")), exitRefused, "", "snapshot save")
}
