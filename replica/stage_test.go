package replica

import (
	"bytes"
	"errors"
	"hash/crc32"
	"testing"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/chubbygo/chubby/replica/vr"
)

// stageFrom stages chunks [from, to) of snap (as the sender's Storage
// stores it) into st and returns what StageSnapshotChunk said last.
func stageFrom(t *testing.T, src, st *Storage, meta vr.SnapshotMeta, from, to uint32) (uint32, error) {
	t.Helper()
	var next uint32
	for n := from; n < to; n++ {
		data, info, err := src.ReadSnapshotChunk(meta.Index, n)
		if err != nil {
			t.Fatal(err)
		}
		if next, err = st.StageSnapshotChunk(meta, info, n, data); err != nil {
			return next, err
		}
	}
	return next, nil
}

// A snapshot received in chunks survives a restart of the receiver
// half-way (the transfer resumes from what is staged), is checked, and is
// installed in place: it loads after another restart, and the next local
// snapshot removes its chunks.
func TestStorageStageResumeInstall(t *testing.T) {
	meta := vr.SnapshotMeta{Index: 50, View: 3, Members: vr.Members{{ID: 1, ClientAddr: "a"}, {ID: 2, ClientAddr: "b"}, {ID: 3, ClientAddr: "c"}}}
	app := bytes.Repeat([]byte("state-"), 5*SnapshotChunkBytes/6+100) // 6 chunks with the envelope
	src, err := OpenStorage(t.TempDir(), StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if err := src.InstallSnapshot(meta.Index, encodeSnapshot(meta, app)); err != nil {
		t.Fatal(err)
	}
	_, info, err := src.ReadSnapshotChunk(meta.Index, 0)
	if err != nil || info.Chunks != 6 {
		t.Fatalf("source snapshot: %+v %v", info, err)
	}

	dir := t.TempDir()
	st, err := OpenStorage(dir, StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if next, err := stageFrom(t, src, st, meta, 0, 3); err != nil || next != 3 {
		t.Fatalf("stage 0..3: %d %v", next, err)
	}
	// A chunk out of order is refused and changes nothing.
	data, _, _ := src.ReadSnapshotChunk(meta.Index, 4)
	if _, err := st.StageSnapshotChunk(meta, info, 4, data); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("chunk 4 after 3: %v", err)
	}
	st.Close()

	if st, err = OpenStorage(dir, StorageOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { st.Close() }()
	got, next, err := st.Staged()
	if err != nil || got != info || next != 3 {
		t.Fatalf("staged after restart: %+v %d %v", got, next, err)
	}
	if next, err := stageFrom(t, src, st, meta, 3, 6); err != nil || next != 6 {
		t.Fatalf("stage 3..6: %d %v", next, err)
	}
	if err := st.installStaged(meta); err != nil {
		t.Fatal(err)
	}
	if _, n, _ := st.Staged(); n != 0 {
		t.Fatalf("%d chunks still staged after the install", n)
	}
	st.Close()
	if st, err = OpenStorage(dir, StorageOptions{}); err != nil {
		t.Fatal(err)
	}
	p, gotApp, err := st.loadVR()
	if err != nil || p.Snapshot == nil || p.Snapshot.Index != 50 || p.Snapshot.View != 3 || !bytes.Equal(gotApp, app) {
		t.Fatalf("load after install: %+v %v equal=%v", p.Snapshot, err, bytes.Equal(gotApp, app))
	}
	// A later local snapshot replaces it and its staged chunks go.
	if err := st.persistReady(0, []vr.Entry{{Index: 51, View: 3, Type: vr.EntryCommand, Data: []byte("x")}}, nil, true); err != nil {
		t.Fatal(err)
	}
	if err := st.saveVRSnapshot(vr.SnapshotMeta{Index: 51, View: 3, Members: meta.Members}, []byte("small")); err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, st, keyStagePrefix); n != 0 {
		t.Fatalf("%d staged chunks left after a newer snapshot", n)
	}
}

// Bytes that are not the snapshot they claim (checksum, or an envelope
// other than the metadata's) are refused at the last chunk, and nothing
// stays staged.
func TestStorageStageRefusesWrongBytes(t *testing.T) {
	meta := vr.SnapshotMeta{Index: 9, View: 2, Members: vr.Members{{ID: 1, ClientAddr: "a"}}}
	blob := encodeSnapshot(meta, bytes.Repeat([]byte("z"), SnapshotChunkBytes+10))
	st, err := OpenStorage(t.TempDir(), StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	good := ChunkInfo{Index: 9, Chunks: 2, Length: uint64(len(blob)), Sum: crc32c(blob)}
	cases := []struct {
		name string
		info ChunkInfo
		meta vr.SnapshotMeta
	}{
		{"checksum", ChunkInfo{Index: 9, Chunks: 2, Length: good.Length, Sum: good.Sum + 1}, meta},
		{"view", good, vr.SnapshotMeta{Index: 9, View: 1, Members: meta.Members}},
		{"members", good, vr.SnapshotMeta{Index: 9, View: 2, Members: vr.Members{{ID: 2, ClientAddr: "a"}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := st.StageSnapshotChunk(c.meta, c.info, 0, blob[:SnapshotChunkBytes]); err != nil {
				t.Fatal(err)
			}
			if _, err := st.StageSnapshotChunk(c.meta, c.info, 1, blob[SnapshotChunkBytes:]); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("wrong %s accepted: %v", c.name, err)
			}
			if _, n, _ := st.Staged(); n != 0 || countKeys(t, st, keyStagePrefix) != 0 {
				t.Fatalf("something stays staged after a refused transfer")
			}
			if err := st.installStaged(c.meta); err == nil {
				t.Fatal("a refused transfer installed")
			}
		})
	}
}

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// countKeys counts the keys under prefix.
func countKeys(t *testing.T, st *Storage, prefix []byte) int {
	t.Helper()
	n := 0
	err := st.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// chunksOf cuts the concatenation of its parts exactly as cutting the
// joined bytes would.
func TestChunksOf(t *testing.T) {
	for _, sizes := range [][]int{{}, {0}, {5}, {8}, {3, 5}, {16, 1}, {7, 7, 7}, {0, 20, 0, 3}, {1, 1, 1, 1, 1, 1, 1, 1, 1}} {
		var parts [][]byte
		var joined []byte
		for i, n := range sizes {
			p := bytes.Repeat([]byte{byte('a' + i)}, n)
			parts, joined = append(parts, p), append(joined, p...)
		}
		var want [][]byte
		for off := 0; off < len(joined) || len(want) == 0; off += 8 {
			want = append(want, joined[off:min(off+8, len(joined))])
			if off+8 >= len(joined) {
				break
			}
		}
		var got [][]byte
		for c := range chunksOf(parts, 8) {
			got = append(got, bytes.Clone(c))
		}
		if len(got) != len(want) {
			t.Fatalf("%v: %d chunks, want %d", sizes, len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("%v: chunk %d is %q, want %q", sizes, i, got[i], want[i])
			}
		}
	}
}
