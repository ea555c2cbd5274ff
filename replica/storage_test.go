package replica

import (
	"bytes"
	"fmt"
	"testing"
)

func TestStorageSnapshotRoundTripAndTruncation(t *testing.T) {
	st, err := OpenStorage(t.TempDir(), StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var entries [][]byte
	for i := 0; i < 100; i++ {
		entries = append(entries, []byte(fmt.Sprintf("e%d", i)))
	}
	if err := st.Append(entries); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 3*snapshotChunkSize/16+5) // several chunks
	if err := st.SaveSnapshot(60, big); err != nil {
		t.Fatal(err)
	}
	first, last := st.Bounds()
	if first != 61 || last != 100 {
		t.Fatalf("bounds after snapshot: %d..%d", first, last)
	}
	idx, got, ok, err := st.LoadSnapshot()
	if err != nil || !ok || idx != 60 || !bytes.Equal(got, big) {
		t.Fatalf("load snapshot: idx=%d ok=%v err=%v equal=%v", idx, ok, err, bytes.Equal(got, big))
	}
	es, err := st.Entries(61, 100)
	if err != nil || len(es) != 40 || string(es[0]) != "e60" {
		t.Fatalf("entries after truncation: %d %v", len(es), err)
	}
	if _, err := st.Entries(10, 20); err == nil {
		t.Fatal("reading truncated entries must fail")
	}
	if err := st.SaveSnapshot(200, []byte("x")); err == nil {
		t.Fatal("snapshot beyond the log end must fail")
	}
}
