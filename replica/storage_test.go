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
	big := bytes.Repeat([]byte("0123456789abcdef"), 3*SnapshotChunkBytes/16+5) // several chunks
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

// TestStorageLoadSnapshotWhileSaving reads the snapshot while newer ones
// are stored and the log appended (the replica stores snapshots off its
// loop, and the loop reads the stored one to send it): every read sees one
// whole snapshot, never the metadata of one with the chunks of another.
func TestStorageLoadSnapshotWhileSaving(t *testing.T) {
	st, err := OpenStorage(t.TempDir(), StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	content := func(i uint64) []byte { // several chunks, different per snapshot
		return bytes.Repeat([]byte{byte(i)}, 2*SnapshotChunkBytes+int(i))
	}
	next := uint64(1)
	appendN := func(n int) {
		es := make([][]byte, n)
		for i := range es {
			es[i] = []byte(fmt.Sprintf("e%d", next))
			next++
		}
		if err := st.Append(es); err != nil {
			t.Error(err)
		}
	}
	appendN(3000)
	if err := st.SaveSnapshot(1000, content(1000)); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 20; i++ {
			appendN(500)
			idx := next - 1 - 200
			if err := st.SaveSnapshot(idx, content(idx)); err != nil {
				t.Error(err)
				return
			}
		}
		close(stop)
	}()
	reads := 0
	for {
		select {
		case <-stop:
			<-done
			if reads == 0 {
				t.Fatal("no read overlapped the saves")
			}
			return
		default:
		}
		idx, data, ok, err := st.LoadSnapshot()
		if err != nil || !ok {
			t.Fatalf("load while saving: ok=%v err=%v", ok, err)
		}
		if !bytes.Equal(data, content(idx)) {
			t.Fatalf("snapshot %d: %d bytes that are not its content", idx, len(data))
		}
		reads++
	}
}

// TestStorageInMemoryLargeEntry: an in-memory store (the layers above test
// on it) holds a file-sized entry; Badger's in-memory default refused any
// value over 64 KiB, and the replica fail-stopped as on a failed disk.
func TestStorageInMemoryLargeEntry(t *testing.T) {
	st, err := OpenStorage("", StorageOptions{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	big := bytes.Repeat([]byte("x"), 900<<10)
	if err := st.Append([][]byte{[]byte("small"), big}); err != nil {
		t.Fatalf("append a %d-byte entry in memory: %v", len(big), err)
	}
	es, err := st.Entries(1, 2)
	if err != nil || len(es) != 2 || !bytes.Equal(es[1], big) {
		t.Fatalf("entries: %d %v", len(es), err)
	}
}
