package replica

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
)

// hashChain is a tiny deterministic state machine: its state is a hash of
// every entry applied, in order, so any lost, duplicated or reordered entry
// changes it.
type hashChain struct {
	n   uint64
	sum [32]byte
}

func (h *hashChain) Apply(index uint64, e []byte) any {
	if index != h.n+1 {
		panic(fmt.Sprintf("apply %d after %d", index, h.n))
	}
	h.n = index
	h.sum = sha256.Sum256(append(h.sum[:], e...))
	return index
}

func (h *hashChain) Snapshot() []byte {
	b := binary.BigEndian.AppendUint64(nil, h.n)
	return append(b, h.sum[:]...)
}

func (h *hashChain) Restore(index uint64, b []byte) error {
	if len(b) != 40 || binary.BigEndian.Uint64(b) != index {
		return fmt.Errorf("bad snapshot")
	}
	h.n = index
	copy(h.sum[:], b[8:])
	return nil
}

func TestLocalDurableAcrossRestart(t *testing.T) {
	for _, snapEvery := range []uint64{1_000_000, 7} {
		t.Run(fmt.Sprintf("snapshotEvery=%d", snapEvery), func(t *testing.T) {
			dir := t.TempDir()
			ctx := context.Background()
			open := func() (*Storage, *hashChain, *Local) {
				st, err := OpenStorage(dir, StorageOptions{})
				if err != nil {
					t.Fatal(err)
				}
				sm := &hashChain{}
				l, err := StartLocal(st, sm, LocalConfig{SnapshotEvery: snapEvery})
				if err != nil {
					t.Fatal(err)
				}
				return st, sm, l
			}
			st, sm, l := open()
			var wg sync.WaitGroup
			for w := 0; w < 8; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 50; i++ {
						if _, err := l.Propose(ctx, []byte(fmt.Sprintf("w%d-%d", w, i))); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			want := *sm
			l.Close()
			st.Close()

			st, sm, l = open()
			defer st.Close()
			defer l.Close()
			if sm.n != want.n || sm.sum != want.sum {
				t.Fatalf("after restart: n=%d sum=%x, want n=%d sum=%x", sm.n, sm.sum, want.n, want.sum)
			}
			if want.n != 400 {
				t.Fatalf("applied %d entries, want 400", want.n)
			}
			v, err := l.Propose(ctx, []byte("after"))
			if err != nil || v.(uint64) != 401 {
				t.Fatalf("propose after restart: %v %v", v, err)
			}
		})
	}
}

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

func TestLocalOverloadAndStop(t *testing.T) {
	st, err := OpenStorage("", StorageOptions{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l, err := StartLocal(st, &hashChain{}, LocalConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Propose(context.Background(), make([]byte, MaxEntryBytes+1)); err == nil {
		t.Fatal("oversize entry accepted")
	}
	l.Close()
	if _, err := l.Propose(context.Background(), []byte("x")); err == nil {
		t.Fatal("propose after close succeeded")
	}
}
