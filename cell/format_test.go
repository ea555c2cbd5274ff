package cell

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/fsm"
	"github.com/chubbygo/chubby/replica"
)

// TestNewerFormatRefusedAtStart: a replica that commits a log entry of a
// newer command format (as from a newer release's master) stops instead
// of applying it, and refuses to start again with an error naming both
// versions; so does one given a data directory of a newer layout.
func TestNewerFormatRefusedAtStart(t *testing.T) {
	dir := t.TempDir()
	tc := startCell(t, Config{DataDir: dir})
	tc.session("x")
	before := stateBytes(tc.s.m)
	v := int32(fs.CommandVersion + 1)
	cmd := &fsm.Command{TimeMs: time.Now().UnixMilli(), Op: &fsm.Op{Tick: &fsm.Tick{}}, Version: &v}
	if _, err := tc.s.log.Propose(ctx, fs.EncodeCommand(cmd)); !errors.Is(err, replica.ErrStopped) {
		t.Fatalf("proposing a newer entry: %v, want the replica stopped", err)
	}
	select {
	case err := <-tc.done:
		if !errors.Is(err, replica.ErrHalted) || !strings.Contains(err.Error(), "format version 2, newer than version 1") {
			t.Fatalf("Serve returned %v, want ErrHalted naming both versions", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the replica did not stop on an entry it cannot apply")
	}
	if !bytes.Equal(stateBytes(tc.s.m), before) {
		t.Fatal("the entry of a newer format changed the state")
	}
	if why := tc.s.unhealthy(); !strings.HasPrefix(why, "stopped: ") || !strings.Contains(why, "newer than version 1") {
		t.Errorf("/healthz of the halted replica says %q, want stopped and why", why)
	}
	tc.s = nil
	_, err := New(Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quietLogger()})
	if err == nil || !strings.Contains(err.Error(), "format version 2, newer than version 1") {
		t.Fatalf("a log with a newer entry: %v", err)
	}
	var fe *fs.FormatError
	if !errors.As(err, &fe) {
		t.Fatalf("%v is not a FormatError", err)
	}

	dir2 := t.TempDir()
	tc2 := startCell(t, Config{DataDir: dir2})
	tc2.session("y")
	tc2.stop()
	st, err := replica.OpenStorage(dir2, replica.StorageOptions{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetMeta("layout", []byte("2")); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = New(Config{DataDir: dir2, Listen: "127.0.0.1:0", Logger: quietLogger()})
	var le *replica.LayoutError
	if !errors.As(err, &le) || !strings.Contains(err.Error(), "format version 2 is newer than version 1") {
		t.Fatalf("a directory of a newer layout: %v", err)
	}
}

// TestNewerSnapshotInDataDirRefused: a data directory whose stored
// snapshot is of a newer format than this release reads (the test writes
// one a version higher) is refused at start with an error naming both
// versions, and the directory is left as it was (it is refused again).
func TestNewerSnapshotInDataDirRefused(t *testing.T) {
	tc := startCell(t, Config{})
	tc.session("x")
	good := saveBackup(t, tc.cli)
	tc.stop()

	// A restored directory gives the snapshot's metadata as a restore
	// writes it; a second directory is seeded the same way with the
	// state's version raised.
	seeded := t.TempDir()
	if _, err := Restore(bytes.NewReader(good), RestoreOptions{DataDir: seeded, ID: 1, Listen: "127.0.0.1:7000", Logger: quietLogger()}); err != nil {
		t.Fatal(err)
	}
	st, err := replica.OpenStorage(seeded, replica.StorageOptions{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	p, app, err := st.ReadPersisted()
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	sn := fsm.NewSnapshot()
	if _, err := sn.FastRead(app); err != nil {
		t.Fatal(err)
	}
	sn.Version = fs.SnapshotVersion + 1
	app = make([]byte, sn.BLength())
	sn.FastWriteNocopy(app, nil)
	if v, err := fs.SnapshotVersionOf(app); err != nil || v != fs.SnapshotVersion+1 {
		t.Fatalf("the raised snapshot reads as version %d, %v", v, err)
	}
	dir := t.TempDir()
	st, err = replica.OpenStorage(dir, replica.StorageOptions{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	err = replica.Seed(st, *p.Snapshot, app)
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("format version %d, newer than version %d", fs.SnapshotVersion+1, fs.SnapshotVersion)
	for range 2 {
		_, err = New(Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: quietLogger()})
		var fe *fs.FormatError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), want) {
			t.Fatalf("a data directory holding a snapshot of a newer format: %v, want a FormatError saying %q", err, want)
		}
	}
}
