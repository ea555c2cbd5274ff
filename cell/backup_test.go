package cell

import (
	"bytes"
	"context"
	"fmt"
	"testing"

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
