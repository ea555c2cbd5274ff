package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/client"
)

// TestExportCommand: chubbyd export --dry-run describes a stopped
// replica's log; chubbyd export FILE writes a backup of its state that
// chubbyd restore accepts; a running replica's directory and bad usage
// are refused.
func TestExportCommand(t *testing.T) {
	dir := t.TempDir()
	c := celltest.Start(t, celltest.Options{DataDir: dir})
	cl, err := client.Connect(context.Background(), client.Config{Addrs: []string{c.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := cl.NewSession(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateFile(context.Background(), "/exported", []byte("x"), client.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"export", "--data", dir, "--dry-run"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "in use") {
		t.Fatalf("export of a running replica: exit %d, %q", code, errb.String())
	}
	cl.Close()
	c.Stop()

	out.Reset()
	errb.Reset()
	if code := run([]string{"export", "--data", dir, "--dry-run", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("export --dry-run: exit %d: %s", code, errb.String())
	}
	var st struct {
		ID, Last, Index uint64
		Nodes           int
		LastOfEpoch     bool `json:"last_of_epoch"`
	}
	if err := json.Unmarshal(out.Bytes(), &st); err != nil || st.ID != 1 || st.Last == 0 || st.Index != st.Last || st.Nodes < 2 || st.LastOfEpoch {
		t.Fatalf("export --dry-run --json: %+v, %v: %s", st, err, out.String())
	}

	file := filepath.Join(t.TempDir(), "cell.snap")
	out.Reset()
	if code := run([]string{"export", "--data", dir, file}, &out, &errb); code != 0 {
		t.Fatalf("export: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "exported replica 1 of "+dir+" to "+file) {
		t.Fatalf("export said %q", out.String())
	}
	if _, err := os.Stat(file + ".partial"); !os.IsNotExist(err) {
		t.Fatalf("the partial file is left: %v", err)
	}
	out.Reset()
	if code := run([]string{"restore", file, "--data", filepath.Join(t.TempDir(), "new")}, &out, &errb); code != 0 {
		t.Fatalf("restore of the export: exit %d: %s", code, errb.String())
	}
	for _, args := range [][]string{{"export", file}, {"export", "--data", dir}, {"export", "--data", dir, "--dry-run", file}} {
		if code := run(args, &out, &errb); code != 2 {
			t.Fatalf("%q: exit %d, want 2 (usage)", args, code)
		}
	}
}
