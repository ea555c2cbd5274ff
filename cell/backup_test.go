package cell

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell/backup"
	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/chubby/combineservice"
	"github.com/chubbygo/chubby/replica"
)

// saveBackup saves a backup of the cell cli reaches.
func saveBackup(t *testing.T, cli combineservice.Client) []byte {
	t.Helper()
	var buf bytes.Buffer
	read := func(ctx context.Context, index int64, chunk int32) (*chubby.SnapshotReadResponse, error) {
		return cli.SnapshotRead(ctx, &chubby.SnapshotReadRequest{Index: index, Chunk: chunk})
	}
	if _, err := backup.Save(ctx, read, &buf, nil); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// startOn starts a cell of cfg on ln (a restored directory's cell).
func startOn(t *testing.T, cfg Config, ln net.Listener) *testCell {
	t.Helper()
	cfg.Listener = ln
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tc := &testCell{t: t, s: s, dir: cfg.DataDir, done: make(chan error, 1)}
	go func() { tc.done <- s.Serve(context.Background()) }()
	tc.cli = newRawClient(t, s.Addr())
	t.Cleanup(tc.stop)
	return tc
}

// TestBackupIsTheStateNow: a backup holds the cell's state as it is when
// the save starts (a snapshot stored for it, not the last periodic one),
// under a header naming the cell, its index and the format versions.
func TestBackupIsTheStateNow(t *testing.T) {
	tc := startCell(t, Config{})
	s := tc.session("w")
	yes := true
	if _, err := tc.cli.CreateFile(ctx, &chubby.CreateFileRequest{Session: s, Path: "/a/b", Content: []byte("x"), MakeParents: &yes}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		file := saveBackup(t, tc.cli)
		hdr, stored, err := backup.Read(bytes.NewReader(file))
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Cell != "local" || hdr.SnapshotVersion != fs.SnapshotVersion || hdr.LayoutVersion != replica.LayoutVersion ||
			hdr.CommandVersion != fs.CommandVersion || hdr.MasterId != "1" || uint64(hdr.Index) != tc.s.log.Applied() {
			t.Fatalf("header %+v (applied %d)", hdr, tc.s.log.Applied())
		}
		if _, app, err := replica.DecodeStoredSnapshot(uint64(hdr.Index), stored); err != nil || !bytes.Equal(app, stateBytes(tc.s.m)) {
			t.Fatalf("the backup is not the cell's state as it is now (err %v)", err)
		}
		if _, err := tc.cli.CreateFile(ctx, &chubby.CreateFileRequest{Session: s, Path: fmt.Sprintf("/a/c%d", i), Content: []byte("y")}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBackupRestoreRoundTrip saves a running cell with files, directories,
// ACLs, a held lock, an ephemeral file and reserved timestamps, restores
// the backup into a new directory and starts a cell on it: the new cell's
// state is byte for byte the saved one (contents, metadata, generations,
// ACLs, locks, sessions, the oracle's mark), it hands out timestamps
// above every one the saved cell gave, and once the saved session ends
// (as after a failover: nobody keeps it alive) its lock's old sequencer is
// refused and its ephemeral file is gone.
func TestBackupRestoreRoundTrip(t *testing.T) {
	const lease = 2 * time.Second
	tc := startCell(t, Config{Lease: lease})
	s := tc.session("saved")
	yes := true
	for p, c := range map[string]string{"/a/b/one": "one", "/a/two": "v0", "/acl/team": "anonymous\n"} {
		if _, err := tc.cli.CreateFile(ctx, &chubby.CreateFileRequest{Session: s, Path: p, Content: []byte(c), MakeParents: &yes}); err != nil {
			t.Fatal(err)
		}
	}
	h := tc.open(s, "/a/two", chubby.CreateMode_OPEN_EXISTING, false)
	for i := range 3 {
		if _, err := tc.cli.SetContents(ctx, &chubby.SetContentsRequest{Handle: h, Content: []byte{'v', byte('1' + i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tc.cli.SetACL(ctx, &chubby.SetACLRequest{Handle: h, Acl: &chubby.ACLNames{ReadAcl: "team", WriteAcl: "team", ChangeAcl: ""}}); err != nil {
		t.Fatal(err)
	}
	lk := tc.open(s, "/a/lock", chubby.CreateMode_OPEN_OR_CREATE, false)
	seq, err := tc.cli.TryAcquire(ctx, &chubby.TryAcquireRequest{Handle: lk, Mode: chubby.LockMode_EXCLUSIVE})
	if err != nil {
		t.Fatal(err)
	}
	tc.open(s, "/a/ephemeral", chubby.CreateMode_CREATE_NEW, true)
	ts, err := tc.cli.GetTimestamps(ctx, &chubby.GetTimestampsRequest{Count: 100})
	if err != nil {
		t.Fatal(err)
	}
	lastTS := ts.First + int64(ts.Count) - 1

	file := saveBackup(t, tc.cli)
	saved := stateBytes(tc.s.m)
	hdr, stored, err := backup.Read(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if hdr.Cell != "local" || hdr.SnapshotVersion != fs.SnapshotVersion || hdr.LayoutVersion != replica.LayoutVersion ||
		hdr.CommandVersion != fs.CommandVersion || hdr.MasterId != "1" {
		t.Fatalf("header %+v", hdr)
	}
	if _, app, err := replica.DecodeStoredSnapshot(uint64(hdr.Index), stored); err != nil || !bytes.Equal(app, saved) {
		t.Fatalf("the backup is not the cell's state as it is now (err %v)", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "restored")
	res, err := Restore(bytes.NewReader(file), RestoreOptions{DataDir: dir, ID: 1, Listen: ln.Addr().String(), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Counts.Nodes != 9 || res.Counts.Sessions != 1 || res.Counts.LocksHeld != 1 {
		t.Fatalf("restored counts %+v", res.Counts)
	}
	tc.stop() // the saved cell is gone; the new one serves its state
	rc := startOn(t, Config{DataDir: dir, Lease: lease}, ln)
	if !bytes.Equal(stateBytes(rc.s.m), saved) {
		t.Fatal("the restored cell's state differs from the saved one")
	}
	got, err := rc.cli.GetTimestamps(ctx, &chubby.GetTimestampsRequest{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got.First <= lastTS {
		t.Fatalf("restored cell's timestamp %d, the saved cell had handed out up to %d", got.First, lastTS)
	}
	r2 := rc.session("after")
	hb := rc.open(r2, "/a/two", chubby.CreateMode_OPEN_EXISTING, false)
	cs, err := rc.cli.GetContentsAndStat(ctx, &chubby.HandleRequest{Handle: hb})
	if err != nil {
		t.Fatal(err)
	}
	if string(cs.Content) != "v3" || cs.Stat.ContentGeneration != 4 || cs.Stat.AclGeneration != 1 || cs.Stat.Acl.GetReadAcl() != "team" {
		t.Fatalf("restored /a/two: %q %+v", cs.Content, cs.Stat)
	}
	// The saved session ends after its lease (nobody keeps it alive);
	// then its lock is free and its sequencer refused, its ephemeral file
	// deleted.
	deadline := time.Now().Add(3*lease + 5*time.Second)
	for {
		cr, err := rc.cli.CheckSequencer(ctx, &chubby.CheckSequencerRequest{Sequencer: seq})
		if err != nil {
			t.Fatal(err)
		}
		if !cr.Valid {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the saved lock's sequencer still valid %v after the restore", 3*lease+5*time.Second)
		}
		time.Sleep(lease / 10)
	}
	r3 := rc.session("later")
	if _, err := rc.cli.Open(ctx, &chubby.OpenRequest{Session: r3, Path: "/a/ephemeral", Mode: chubby.OpenMode_READ, Create: chubby.CreateMode_OPEN_EXISTING}); codeOf(err) != chubby.ErrorCode_NOT_FOUND {
		t.Fatalf("the saved session's ephemeral file after it ended: %v", err)
	}
}

// TestRestoreRefusesBadBackups: a truncated, corrupted or padded backup,
// one of a newer snapshot format and one into a non-empty directory are
// refused with an error that says why, and nothing is written.
func TestRestoreRefusesBadBackups(t *testing.T) {
	tc := startCell(t, Config{})
	s := tc.session("x")
	yes := true
	for _, p := range []string{"/d/f1", "/d/f2"} {
		if _, err := tc.cli.CreateFile(ctx, &chubby.CreateFileRequest{Session: s, Path: p, Content: bytes.Repeat([]byte("y"), 1000), MakeParents: &yes}); err != nil {
			t.Fatal(err)
		}
	}
	good := saveBackup(t, tc.cli)
	hl := int(binary.BigEndian.Uint32(good[len(backup.Magic):]))
	body := len(backup.Magic) + 4 + hl

	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 0x40
		return b
	}
	// A body whose state is of a newer format, with a CRC that matches:
	// only the snapshot's own version check can refuse it.
	newer := func() []byte {
		h, stored, err := backup.Read(bytes.NewReader(good))
		if err != nil {
			t.Fatal(err)
		}
		meta, app, err := replica.DecodeStoredSnapshot(uint64(h.Index), stored)
		if err != nil {
			t.Fatal(err)
		}
		app = bytes.Clone(app)
		binary.BigEndian.PutUint32(app[3:], fs.SnapshotVersion+1)
		_ = meta
		stored = append(stored[:len(stored)-len(app):len(stored)-len(app)], app...)
		h.SnapshotVersion = fs.SnapshotVersion + 1
		h.Checksum = int64(crc32.Checksum(stored, crc32.MakeTable(crc32.Castagnoli)))
		var out bytes.Buffer
		hb := make([]byte, h.BLength())
		h.FastWriteNocopy(hb, nil)
		out.WriteString(backup.Magic)
		out.Write(binary.BigEndian.AppendUint32(nil, uint32(len(hb))))
		out.Write(hb)
		out.Write(stored)
		return out.Bytes()
	}()
	cases := []struct {
		name string
		file []byte
		want string
	}{
		{"empty", nil, "first 12 bytes"},
		{"not a backup", []byte("hello, this is not a backup file"), "does not start with"},
		{"truncated in the header", good[:len(backup.Magic)+4+hl/2], "truncated in its header"},
		{"truncated in the snapshot", good[:body+(len(good)-body)/2], "truncated"},
		{"truncated by one byte", good[:len(good)-1], "truncated"},
		{"a byte after it", append(bytes.Clone(good), 0), "bytes after"},
		{"a corrupted byte in the snapshot", flip(body + (len(good)-body)*2/3), "CRC-32C"},
		{"a corrupted header length", flip(len(backup.Magic)), "header"},
		{"a newer snapshot format", newer, "format version 4, newer than version 3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "r")
			_, err := Restore(bytes.NewReader(c.file), RestoreOptions{DataDir: dir, ID: 1, Listen: "127.0.0.1:7000", Logger: quietLogger()})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error saying %q", err, c.want)
			}
			var fe *fs.FormatError
			if c.name != "a newer snapshot format" && !errors.Is(err, backup.ErrInvalid) {
				t.Errorf("%v does not wrap backup.ErrInvalid", err)
			} else if c.name == "a newer snapshot format" && !errors.As(err, &fe) {
				t.Errorf("%v is not a FormatError", err)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a refused restore wrote %s (%v)", dir, err)
			}
		})
	}
	// A sound backup into a directory that holds something: refused, the
	// directory untouched.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "keep"), []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(bytes.NewReader(good), RestoreOptions{DataDir: dir, ID: 1, Listen: "127.0.0.1:7000", Logger: quietLogger()}); !errors.Is(err, ErrRestoreTarget) {
		t.Fatalf("restore into a non-empty directory: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("the refused restore changed the directory: %d entries", len(ents))
	}
	// And into an empty one: accepted.
	if _, err := Restore(bytes.NewReader(good), RestoreOptions{DataDir: t.TempDir(), ID: 1, Listen: "127.0.0.1:7000", Logger: quietLogger()}); err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotReadChecks: SnapshotRead refuses malformed requests, answers
// NOT_FOUND for a snapshot that is not the stored one, and needs
// change_acl on "/".
func TestSnapshotReadChecks(t *testing.T) {
	tc := startCell(t, Config{})
	for _, r := range []*chubby.SnapshotReadRequest{{Index: -1}, {Index: 0, Chunk: 1}, {Index: 5, Chunk: -1}} {
		_, err := tc.cli.SnapshotRead(ctx, r)
		wantCode(t, err, chubby.ErrorCode_INVALID_ARGUMENT)
	}
	first, err := tc.cli.SnapshotRead(ctx, &chubby.SnapshotReadRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tc.cli.SnapshotRead(ctx, &chubby.SnapshotReadRequest{Index: first.Index + 1})
	wantCode(t, err, chubby.ErrorCode_NOT_FOUND)
	_, err = tc.cli.SnapshotRead(ctx, &chubby.SnapshotReadRequest{Index: first.Index, Chunk: first.Chunks})
	wantCode(t, err, chubby.ErrorCode_INVALID_ARGUMENT)
	// With ACLs: anonymous lacks change_acl on "/" once it names an ACL
	// that does not list it.
	s := tc.session("admin")
	yes := true
	if _, err := tc.cli.CreateFile(ctx, &chubby.CreateFileRequest{Session: s, Path: "/acl/admin", Content: []byte("someone-else\n"), MakeParents: &yes}); err != nil {
		t.Fatal(err)
	}
	root := tc.open(s, "/", chubby.CreateMode_OPEN_EXISTING, false)
	if _, err := tc.cli.SetACL(ctx, &chubby.SetACLRequest{Handle: root, Acl: &chubby.ACLNames{ChangeAcl: "admin"}}); err != nil {
		t.Fatal(err)
	}
	_, err = tc.cli.SnapshotRead(ctx, &chubby.SnapshotReadRequest{})
	wantCode(t, err, chubby.ErrorCode_PERMISSION_DENIED)
}

// TestRestoreThreeReplicas: a backup of a one-replica cell seeds the three
// directories of a new three-replica cell (each with its id and the same
// peers); the new cell elects a master, serves the saved state and
// commits new writes on all three.
func TestRestoreThreeReplicas(t *testing.T) {
	tc := startCell(t, Config{})
	s := tc.session("w")
	yes := true
	if _, err := tc.cli.CreateFile(ctx, &chubby.CreateFileRequest{Session: s, Path: "/x/y", Content: []byte("saved"), MakeParents: &yes}); err != nil {
		t.Fatal(err)
	}
	file := saveBackup(t, tc.cli)
	saved := stateBytes(tc.s.m)
	tc.stop()

	mc := restoredCell(t, file, 3)
	m := mc.master()
	if m == nil {
		t.Fatal("no master in the restored cell")
	}
	for _, srv := range mc.servers {
		if !bytes.Equal(stateBytes(srv.m), saved) {
			t.Fatalf("replica %d's restored state differs from the saved one", srv.cfg.ID)
		}
	}
	cli := newRawClient(t, m.Addr())
	r, err := cli.CreateSession(ctx, &chubby.CreateSessionRequest{ClientName: "new"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.CreateFile(ctx, &chubby.CreateFileRequest{Session: r.Session, Path: "/x/new", Content: []byte("n")}); err != nil {
		t.Fatal(err)
	}
	want := m.log.Applied()
	deadline := time.Now().Add(10 * time.Second)
	for _, srv := range mc.servers {
		for srv.log.Applied() < want {
			if time.Now().After(deadline) {
				t.Fatalf("replica %d applied %d of %d", srv.cfg.ID, srv.log.Applied(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// restoredCell seeds n new replicas on loopback from the backup file, as
// chubbyd restore does for every replica of a new cell, and starts them;
// they stop when the test ends.
func restoredCell(t *testing.T, file []byte, n int) *multiCell {
	t.Helper()
	peers, lns, pls := loopbackPeers(t, n)
	mc := &multiCell{t: t}
	for i := range n {
		dir := t.TempDir()
		if _, err := Restore(bytes.NewReader(file), RestoreOptions{DataDir: dir, ID: uint64(i + 1), Peers: peers, Logger: quietLogger()}); err != nil {
			t.Fatal(err)
		}
		srv, err := New(Config{ID: uint64(i + 1), Peers: peers, Listener: lns[i], PeerListener: pls[i], DataDir: dir, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- srv.Serve(context.Background()) }()
		mc.servers, mc.done = append(mc.servers, srv), append(mc.done, done)
	}
	t.Cleanup(func() {
		for i, srv := range mc.servers {
			srv.Stop()
			<-mc.done[i]
		}
	})
	return mc
}
