package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/chubbygo/chubby/cell/backup"
)

// TestSnapshotSave: snapshot save writes a whole backup of the cell and
// says so; usage errors exit 2.
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

	want(t, at(t, c.Addr, "", "snapshot", "save"), exitUsage, "", "exactly one FILE")
	want(t, at(t, c.Addr, "", "snapshot"), exitUsage, "", "save FILE")
	want(t, at(t, c.Addr, "", "snapshot", "save", filepath.Join(t.TempDir(), "no", "such", "dir", "f")), exitRefused, "", "snapshot save")
}
