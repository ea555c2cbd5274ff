package replica

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/chubbygo/chubby/replica/vr"
)

// oldMembers is a configuration as replicas stored it before vr.Member had
// typed addresses: version 1, the count, then per member its id and one
// length-prefixed address, which the cell filled with "client|peer" (and
// tests and the simulator with a bare address).
func oldMembers() []byte {
	b := []byte{1, 3}
	for _, m := range []struct {
		id   uint64
		addr string
	}{{1, "10.0.0.1:7000|10.0.0.1:7100"}, {2, "10.0.0.2:7000|10.0.0.2:7100"}, {3, "r3:7000"}} {
		b = binary.AppendUvarint(b, m.id)
		b = binary.AppendUvarint(b, uint64(len(m.addr)))
		b = append(b, m.addr...)
	}
	return b
}

var typedMembers = vr.Members{
	{ID: 1, ClientAddr: "10.0.0.1:7000", PeerAddr: "10.0.0.1:7100"},
	{ID: 2, ClientAddr: "10.0.0.2:7000", PeerAddr: "10.0.0.2:7100"},
	{ID: 3, ClientAddr: "r3:7000"},
}

// TestStoredMembersOfOldFormat: a log and a snapshot written by replicas
// that kept a member's addresses packed in one string still load, into
// the typed fields; and a configuration is written today in the very same
// bytes, so replicas of either kind read each other's logs and snapshots.
func TestStoredMembersOfOldFormat(t *testing.T) {
	if got := vr.EncodeMembers(typedMembers); !bytes.Equal(got, oldMembers()) {
		t.Fatalf("EncodeMembers writes %q, the stored format is %q", got, oldMembers())
	}

	dir := t.TempDir()
	reopen := func(st *Storage) *Storage {
		t.Helper()
		if st != nil {
			st.Close()
		}
		st, err := OpenStorage(dir, StorageOptions{Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := reopen(nil)
	defer func() { st.Close() }()

	// Entry 1, the configuration, as encodeEntry lays it out: type, view
	// (uvarint), data; then two commands.
	config := append([]byte{byte(vr.EntryConfig), 0}, oldMembers()...)
	if err := st.Append([][]byte{config, {byte(vr.EntryCommand), 0, 'x'}, {byte(vr.EntryCommand), 1, 'y'}}); err != nil {
		t.Fatal(err)
	}
	st = reopen(st)
	p, _, err := st.loadVR()
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Entries) != 3 || p.Entries[0].Type != vr.EntryConfig {
		t.Fatalf("entries %+v", p.Entries)
	}
	if m, err := vr.DecodeMembers(p.Entries[0].Data); err != nil || !reflect.DeepEqual(m, typedMembers) {
		t.Fatalf("configuration entry: %+v, %v; want %+v", m, err, typedMembers)
	}

	// A snapshot at 2 whose envelope carries the configuration.
	snap := binary.BigEndian.AppendUint32(nil, snapMagic)
	snap = binary.BigEndian.AppendUint64(snap, 0)
	snap = binary.BigEndian.AppendUint32(snap, uint32(len(oldMembers())))
	snap = append(snap, oldMembers()...)
	snap = append(snap, "app state"...)
	if err := st.SaveSnapshot(2, snap); err != nil {
		t.Fatal(err)
	}
	st = reopen(st)
	p, app, err := st.loadVR()
	if err != nil {
		t.Fatal(err)
	}
	if p.Snapshot == nil || p.Snapshot.Index != 2 || string(app) != "app state" {
		t.Fatalf("snapshot %+v, app %q", p.Snapshot, app)
	}
	if !reflect.DeepEqual(p.Snapshot.Members, typedMembers) {
		t.Fatalf("snapshot members %+v, want %+v", p.Snapshot.Members, typedMembers)
	}
	if len(p.Entries) != 1 || p.Entries[0].Index != 3 {
		t.Fatalf("entries after the snapshot: %+v", p.Entries)
	}
}
