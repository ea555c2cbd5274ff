package backup

import (
	"bytes"
	"context"
	"errors"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chubbygo/chubby/gen/chubby"
)

// master is a fake master's SnapshotRead over snap, cut in chunks of at
// most MaxChunkBytes; change, if set, may alter each answer.
type master struct {
	snap   []byte
	index  int64
	change func(r *chubby.SnapshotReadResponse)
	reads  []int32 // the chunks asked for, in order
}

func (m *master) chunks() int32 {
	return int32(max(1, (len(m.snap)+MaxChunkBytes-1)/MaxChunkBytes))
}

func (m *master) read(_ context.Context, index int64, chunk int32) (*chubby.SnapshotReadResponse, error) {
	m.reads = append(m.reads, chunk)
	if index != 0 && index != m.index {
		return nil, &chubby.ChubbyError{Code: chubby.ErrorCode_NOT_FOUND, Message: "gone"}
	}
	lo := min(int(chunk)*MaxChunkBytes, len(m.snap))
	hi := min(lo+MaxChunkBytes, len(m.snap))
	r := &chubby.SnapshotReadResponse{
		Cell: "test-cell", Index: m.index, Chunks: m.chunks(), Length: int64(len(m.snap)),
		Checksum: int64(crc32.Checksum(m.snap, castagnoli)), Chunk: chunk, Data: m.snap[lo:hi],
		SnapshotVersion: 3, LayoutVersion: 1, CommandVersion: 1, MasterId: "2",
	}
	if m.change != nil {
		m.change(r)
	}
	return r, nil
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestSaveStreamsChunks: Save asks for a new snapshot, then for its chunks
// one by one, reports the progress after every chunk, and writes a file
// that Read gives back whole, with the cell's name, index and versions in
// its header.
func TestSaveStreamsChunks(t *testing.T) {
	m := &master{snap: randomBytes(2*MaxChunkBytes + 12345), index: 77}
	var progress [][2]int64
	var out bytes.Buffer
	h, err := Save(context.Background(), m.read, &out, func(done, total int64) {
		progress = append(progress, [2]int64{done, total})
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.reads) != 3 || m.reads[0] != 0 || m.reads[1] != 1 || m.reads[2] != 2 {
		t.Fatalf("chunks read %v, want [0 1 2]", m.reads)
	}
	n := int64(len(m.snap))
	want := [][2]int64{{MaxChunkBytes, n}, {2 * MaxChunkBytes, n}, {n, n}}
	if len(progress) != len(want) {
		t.Fatalf("progress %v, want %v", progress, want)
	}
	for i := range want {
		if progress[i] != want[i] {
			t.Fatalf("progress %v, want %v", progress, want)
		}
	}
	rh, snap, err := Read(bytes.NewReader(out.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snap, m.snap) {
		t.Fatal("the file's snapshot differs from the master's")
	}
	if h.Cell != "test-cell" || h.Index != 77 || h.Length != n {
		t.Fatalf("Save's header %+v", h)
	}
	if rh.Cell != "test-cell" || rh.Index != 77 || rh.Length != n || rh.SnapshotVersion != 3 || rh.LayoutVersion != 1 ||
		rh.CommandVersion != 1 || rh.MasterId != "2" || rh.SavedUnixMs <= 0 {
		t.Fatalf("the file's header %+v", rh)
	}
}

// TestSaveRefusesWhatDoesNotAddUp: a chunk of another snapshot, or the
// snapshot gone from the master, is ErrReplaced (the save may start
// again); chunks whose whole does not match the length and CRC the master
// gave are an error.
func TestSaveRefusesWhatDoesNotAddUp(t *testing.T) {
	snap := randomBytes(MaxChunkBytes + 100)
	cases := []struct {
		name     string
		change   func(r *chubby.SnapshotReadResponse)
		index    int64 // the master's snapshot index for chunks after the first
		replaced bool
		want     string
	}{
		{"a chunk of another snapshot", func(r *chubby.SnapshotReadResponse) {
			if r.Chunk == 1 {
				r.Index = 78
			}
		}, 77, true, "belongs to the snapshot at 78"},
		{"the snapshot gone", nil, 78, true, "gone"},
		{"a corrupted chunk", func(r *chubby.SnapshotReadResponse) {
			if r.Chunk == 1 {
				r.Data = bytes.Clone(r.Data)
				r.Data[0] ^= 1
			}
		}, 77, false, "CRC-32C"},
		{"a short chunk", func(r *chubby.SnapshotReadResponse) {
			if r.Chunk == 1 {
				r.Data = r.Data[1:]
			}
		}, 77, false, "sent"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := &master{snap: snap, index: 77, change: c.change}
			read := func(ctx context.Context, index int64, chunk int32) (*chubby.SnapshotReadResponse, error) {
				if chunk > 0 {
					m.index = c.index
				}
				return m.read(ctx, index, chunk)
			}
			_, err := Save(context.Background(), read, io.Discard, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) || errors.Is(err, ErrReplaced) != c.replaced {
				t.Fatalf("got %v; want an error saying %q (ErrReplaced: %v)", err, c.want, c.replaced)
			}
		})
	}
}

// TestWriteFileAllOrNothing: a failed write leaves neither the partial
// file nor a change to an existing file; a successful one replaces it.
func TestWriteFileAllOrNothing(t *testing.T) {
	file := filepath.Join(t.TempDir(), "cell.snap")
	if err := os.WriteFile(file, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := WriteFile(file, func(w io.Writer) error {
		if _, err := w.Write([]byte("half a backup")); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("WriteFile: %v", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "old" {
		t.Fatalf("a failed write changed the file to %q", b)
	}
	if _, err := os.Stat(file + ".partial"); !os.IsNotExist(err) {
		t.Fatalf("a failed write left the partial file (%v)", err)
	}
	if err := WriteFile(file, func(w io.Writer) error { _, err := w.Write([]byte("new")); return err }); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(file); string(b) != "new" {
		t.Fatalf("the file holds %q after a successful write", b)
	}
}
