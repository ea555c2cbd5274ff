package fs

import (
	"errors"
	"strings"
	"testing"

	"github.com/chubbygo/chubby/gen/fsm"
)

// TestSnapshotFormatVersions: a snapshot of a newer version is refused
// with a *FormatError naming both versions, one older than the oldest read
// with the way to upgrade it, and SnapshotVersionOf reads the version
// without decoding the rest.
func TestSnapshotFormatVersions(t *testing.T) {
	h := newHarness(t)
	h.write(h.session(), "/d/f", "x")
	b := h.s.Snapshot()
	if v, err := SnapshotVersionOf(b); err != nil || v != SnapshotVersion {
		t.Fatalf("SnapshotVersionOf = %d, %v; want %d", v, err, SnapshotVersion)
	}
	if _, err := SnapshotVersionOf([]byte("not a snapshot")); err == nil {
		t.Fatal("SnapshotVersionOf read a version from garbage")
	}
	with := func(v int32) []byte {
		sn, err := decodeSnapshot(b)
		if err != nil {
			t.Fatal(err)
		}
		sn.Version = v
		return EncodeSnapshotForTest(sn)
	}
	_, err := Restore(with(SnapshotVersion+1), DefaultLimits())
	var fe *FormatError
	if !errors.As(err, &fe) || fe.Found != SnapshotVersion+1 || fe.Newest != SnapshotVersion {
		t.Fatalf("newer snapshot: %v, want a FormatError", err)
	}
	for _, want := range []string{"version 4", "version 3", "newer"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("newer snapshot: %q does not say %q", err, want)
		}
	}
	_, err = Restore(with(1), DefaultLimits())
	if !errors.As(err, &fe) || fe.Upgrade == "" || !strings.Contains(err.Error(), "upgrade it with") {
		t.Fatalf("older snapshot: %v, want a FormatError with the upgrade", err)
	}
	if v, _ := SnapshotVersionOf(with(7)); v != 7 {
		t.Fatalf("SnapshotVersionOf = %d, want 7", v)
	}
	if _, err := Restore(with(OldestSnapshotVersion), DefaultLimits()); err != nil {
		t.Fatalf("version %d refused: %v", OldestSnapshotVersion, err)
	}
}

// TestCommandFormatVersions: a command of a newer version is refused, not
// applied; version 1 (unset or set) is applied.
func TestCommandFormatVersions(t *testing.T) {
	c := &fsm.Command{TimeMs: 1, Op: opCreateSession("x")}
	if err := CheckCommand(EncodeCommand(c)); err != nil {
		t.Fatalf("unversioned command refused: %v", err)
	}
	v := int32(CommandVersion)
	c.Version = &v
	if err := CheckCommand(EncodeCommand(c)); err != nil {
		t.Fatalf("version %d refused: %v", v, err)
	}
	v = CommandVersion + 1
	s := New(DefaultLimits())
	before := s.Snapshot()
	_, _, err := s.ApplyBytes(EncodeCommand(c))
	var fe *FormatError
	if !errors.As(err, &fe) || fe.Found != CommandVersion+1 || !strings.Contains(err.Error(), "version 2") || !strings.Contains(err.Error(), "version 1") {
		t.Fatalf("newer command: %v, want a FormatError naming both versions", err)
	}
	if string(s.Snapshot()) != string(before) {
		t.Fatal("a refused newer command changed the state")
	}
	if err := CheckCommand(EncodeCommand(c)); !errors.As(err, &fe) {
		t.Fatalf("CheckCommand of a newer command: %v", err)
	}
}
