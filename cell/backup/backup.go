// Package backup is a cell's backup file: what chubbyfs snapshot save
// writes and chubbyd restore reads (package cell, Restore).
//
// A backup is the 8 bytes "CHUBBYBK", a 4-byte big-endian length, that
// many bytes of Thrift binary fsm.BackupHeader (the cell's name, the log
// index, the format versions, the length and CRC-32C of what follows),
// then exactly Length bytes of the snapshot as the master's disk stores
// it (the replication protocol's envelope, then the fs snapshot), and
// nothing after. Save streams it from the master chunk by chunk
// (chubby.Cell.SnapshotRead); Read checks all of it before it returns
// anything.
package backup

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// Magic starts every backup file.
const Magic = "CHUBBYBK"

// Limits of what Read accepts.
const (
	// MaxHeaderBytes bounds the header (a cell name and a replica id, a
	// few numbers).
	MaxHeaderBytes = 64 << 10
	// MaxSnapshotBytes bounds the snapshot (replica.MaxSnapshotBytes).
	MaxSnapshotBytes = 64 << 30
	// MaxChunkBytes bounds one chunk a master sends
	// (replica.MaxSnapshotChunkBytes).
	MaxChunkBytes = 1 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrInvalid is wrapped by every error Read returns for a file that is not
// a whole, intact backup (truncated, corrupted, not a backup).
var ErrInvalid = errors.New("not a valid backup")

// ErrReplaced: the snapshot a Save was reading is gone from the master (a
// new master answers, or it was replaced); the save may start again.
var ErrReplaced = errors.New("backup: the snapshot being saved is gone from the master")

// Reader is how Save reads the cell: chubby.Cell.SnapshotRead on the master.
type Reader func(ctx context.Context, index int64, chunk int32) (*chubby.SnapshotReadResponse, error)

// Progress, if set, is told after every chunk how many of the snapshot's
// bytes are written.
type Progress func(done, total int64)

// Save reads a new snapshot from the cell through read and writes the
// backup file to w: it asks for a snapshot of the state as it is now
// (index 0) and then for its chunks one by one, checks that every chunk
// belongs to the same snapshot, and the length and CRC-32C of the whole.
// It returns the header written. A snapshot that disappears from the
// master midway is ErrReplaced (wrapping the cell's NOT_FOUND): the
// caller may start again with a fresh w.
func Save(ctx context.Context, read Reader, w io.Writer, progress Progress) (*fsm.BackupHeader, error) {
	start := time.Now()
	first, err := read(ctx, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("backup: start: %w", err)
	}
	if err := checkChunk(first, nil, 0); err != nil {
		return nil, err
	}
	h := &fsm.BackupHeader{
		Cell: first.Cell, Index: first.Index, Length: first.Length, Checksum: first.Checksum,
		SnapshotVersion: first.SnapshotVersion, LayoutVersion: first.LayoutVersion, CommandVersion: first.CommandVersion,
		SavedUnixMs: start.UnixMilli(), MasterId: first.MasterId,
	}
	if err := writeHeader(w, h); err != nil {
		return nil, err
	}
	sum := uint32(0)
	var done int64
	resp := first
	for n := int32(0); ; n++ {
		if n > 0 {
			if resp, err = read(ctx, h.Index, n); err != nil {
				var ce *chubby.ChubbyError
				if errors.As(err, &ce) && ce.Code == chubby.ErrorCode_NOT_FOUND {
					return nil, fmt.Errorf("%w: chunk %d: %w", ErrReplaced, n, err)
				}
				return nil, fmt.Errorf("backup: chunk %d: %w", n, err)
			}
			if err := checkChunk(resp, first, n); err != nil {
				return nil, err
			}
		}
		if _, err := w.Write(resp.Data); err != nil {
			return nil, fmt.Errorf("backup: write: %w", err)
		}
		sum = crc32.Update(sum, castagnoli, resp.Data)
		done += int64(len(resp.Data))
		if progress != nil {
			progress(done, h.Length)
		}
		if n == first.Chunks-1 {
			break
		}
	}
	if done != h.Length || int64(sum) != h.Checksum {
		return nil, fmt.Errorf("backup: the master sent %d bytes with CRC-32C %#x; its snapshot has %d with %#x", done, sum, h.Length, h.Checksum)
	}
	return h, nil
}

// checkChunk checks a SnapshotRead answer: alone (first nil), and against
// the first chunk's description.
func checkChunk(r, first *chubby.SnapshotReadResponse, n int32) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("backup: chunk %d from the master: "+format, append([]any{n}, args...)...)
	}
	switch {
	case r == nil:
		return bad("missing")
	case r.Chunk != n:
		return bad("it is chunk %d", r.Chunk)
	case len(r.Data) > MaxChunkBytes:
		return bad("%d bytes, over %d", len(r.Data), MaxChunkBytes)
	case first == nil && (r.Index < 1 || r.Chunks < 1 || r.Length < 0 || r.Length > MaxSnapshotBytes ||
		r.Checksum < 0 || r.Checksum > 0xffffffff || r.Length > int64(r.Chunks)*MaxChunkBytes):
		return bad("index %d, %d chunks, %d bytes, CRC %d: out of range", r.Index, r.Chunks, r.Length, r.Checksum)
	case first != nil && (r.Index != first.Index || r.Chunks != first.Chunks || r.Length != first.Length || r.Checksum != first.Checksum):
		return fmt.Errorf("%w: chunk %d belongs to the snapshot at %d, not %d", ErrReplaced, n, r.Index, first.Index)
	}
	return nil
}

func writeHeader(w io.Writer, h *fsm.BackupHeader) error {
	hb := make([]byte, h.BLength())
	h.FastWriteNocopy(hb, nil)
	out := make([]byte, 0, len(Magic)+4+len(hb))
	out = append(out, Magic...)
	out = binary.BigEndian.AppendUint32(out, uint32(len(hb)))
	out = append(out, hb...)
	if _, err := w.Write(out); err != nil {
		return fmt.Errorf("backup: write header: %w", err)
	}
	return nil
}

// Read reads a whole backup from r and checks it: the magic, the header
// (its fields in range), exactly Length bytes after it with its CRC-32C,
// and nothing after them. It returns the header and the snapshot as the
// master stored it. Any fault is an error wrapping ErrInvalid that says
// what is wrong; what the snapshot holds is the caller's to check.
func Read(r io.Reader) (*fsm.BackupHeader, []byte, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
	}
	pre := make([]byte, len(Magic)+4)
	if _, err := io.ReadFull(r, pre); err != nil {
		return nil, nil, bad("reading its first %d bytes: %v", len(pre), err)
	}
	if string(pre[:len(Magic)]) != Magic {
		return nil, nil, bad("it does not start with %q", Magic)
	}
	hl := binary.BigEndian.Uint32(pre[len(Magic):])
	if hl == 0 || hl > MaxHeaderBytes {
		return nil, nil, bad("header of %d bytes (1..%d)", hl, MaxHeaderBytes)
	}
	hb := make([]byte, hl)
	if _, err := io.ReadFull(r, hb); err != nil {
		return nil, nil, bad("truncated in its header: %v", err)
	}
	h, err := decodeHeader(hb)
	if err != nil {
		return nil, nil, bad("header: %v", err)
	}
	if h.Index < 1 || h.Length < 0 || h.Length > MaxSnapshotBytes || h.Checksum < 0 || h.Checksum > 0xffffffff {
		return nil, nil, bad("header: index %d, %d bytes, CRC %d: out of range", h.Index, h.Length, h.Checksum)
	}
	var body bytes.Buffer
	body.Grow(int(min(h.Length, 1<<30)))
	n, err := io.Copy(&body, io.LimitReader(r, h.Length+1))
	if err != nil {
		return nil, nil, bad("reading the snapshot: %v", err)
	}
	switch {
	case n < h.Length:
		return nil, nil, bad("truncated: %d of the snapshot's %d bytes", n, h.Length)
	case n > h.Length:
		return nil, nil, bad("bytes after the snapshot's %d", h.Length)
	}
	snap := body.Bytes()
	if sum := crc32.Checksum(snap, castagnoli); int64(sum) != h.Checksum {
		return nil, nil, bad("CRC-32C %#x of the snapshot, the header says %#x: the file is corrupted", sum, h.Checksum)
	}
	return h, snap, nil
}

// decodeHeader decodes a header; the generated reader is trusted with
// nothing: a panic on garbage is an error.
func decodeHeader(b []byte) (h *fsm.BackupHeader, err error) {
	h = fsm.NewBackupHeader()
	defer func() {
		if r := recover(); r != nil {
			h, err = nil, fmt.Errorf("undecodable (%v)", r)
		}
	}()
	n, err := h.FastRead(b)
	if err != nil {
		return nil, err
	}
	if n != len(b) {
		return nil, fmt.Errorf("%d trailing bytes", len(b)-n)
	}
	return h, nil
}

// Write writes a backup of stored (a snapshot as a replica's disk stores
// it) to w, with the header h, whose Length and Checksum it sets: what
// Save writes when it reads from a master, for a snapshot at hand (chubbyd
// export).
func Write(w io.Writer, h *fsm.BackupHeader, stored []byte) error {
	if len(stored) > MaxSnapshotBytes {
		return fmt.Errorf("backup: a snapshot of %d bytes, over %d", len(stored), MaxSnapshotBytes)
	}
	h.Length, h.Checksum = int64(len(stored)), int64(crc32.Checksum(stored, castagnoli))
	if err := writeHeader(w, h); err != nil {
		return err
	}
	if _, err := w.Write(stored); err != nil {
		return fmt.Errorf("backup: write: %w", err)
	}
	return nil
}

// WriteFile writes a backup file as a whole or not at all: write writes it
// to FILE.partial, which is synced and renamed to file (and the rename made
// durable); on any error the partial file is removed and file is left as
// it was.
func WriteFile(file string, write func(io.Writer) error) error {
	tmp := file + ".partial"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	err = write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, file)
	}
	if err == nil {
		if d, derr := os.Open(filepath.Dir(file)); derr == nil {
			err = d.Sync()
			d.Close()
		}
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}
