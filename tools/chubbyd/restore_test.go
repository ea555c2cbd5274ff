package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chubbygo/chubby/cell/backup"
	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/client"
)

// TestRestoreCommand: chubbyd restore seeds a directory from a sound
// backup and says what it restored; a corrupted one exits 1 and writes
// nothing; a missing --data is a usage error.
func TestRestoreCommand(t *testing.T) {
	c := celltest.Start(t, celltest.Options{})
	cl, err := client.Connect(context.Background(), client.Config{Addrs: []string{c.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var file bytes.Buffer
	if _, err := backup.Save(context.Background(), cl.SnapshotRead, &file, nil); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(t.TempDir(), "cell.snap")
	bad := filepath.Join(t.TempDir(), "bad.snap")
	if err := os.WriteFile(good, file.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, file.Bytes()[:file.Len()-3], 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	dir := filepath.Join(t.TempDir(), "r1")
	if code := run([]string{"restore", good, "--data", dir, "--id", "1", "--peers", "1=127.0.0.1:7000/127.0.0.1:7100,2=127.0.0.1:7001/127.0.0.1:7101,3=127.0.0.1:7002/127.0.0.1:7102"}, &out, &errb); code != 0 {
		t.Fatalf("restore: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), `restored `+good+` into `+dir+` for replica 1`) || !strings.Contains(out.String(), `cell "local"`) {
		t.Fatalf("restore said %q", out.String())
	}
	out.Reset()
	errb.Reset()
	dir2 := filepath.Join(t.TempDir(), "r2")
	if code := run([]string{"restore", bad, "--data", dir2}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "truncated") {
		t.Fatalf("a truncated backup: exit %d, %q", code, errb.String())
	}
	if _, err := os.Stat(dir2); !os.IsNotExist(err) {
		t.Fatalf("a refused restore made %s", dir2)
	}
	if code := run([]string{"restore", good}, &out, &errb); code != 2 {
		t.Fatalf("restore without --data: exit %d", code)
	}
}
