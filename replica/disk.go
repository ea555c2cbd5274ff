package replica

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/chubbygo/chubby/replica/vr"
)

// storageDisk is the Driver's Disk on Storage (Badger): a disk-writer
// goroutine carries out writes in order, joining consecutive async writes
// of one view into one batch with one fsync (group commit across the
// loop's Readies); a write issued while the writer is idle is carried out
// on the caller's goroutine, which saves two goroutine hand-offs on every
// backup write. Snapshots are stored by a goroutine of their own.
//
// Completions are collected under a mutex and announced on a channel of
// capacity one, so the writer never blocks on the loop (which may itself
// be blocked queueing the next write).
type storageDisk struct {
	st       *Storage
	maxBatch int
	onBatch  func(entries, bytes int, d time.Duration)

	queue chan *Write
	done  chan struct{} // closed when the writer has returned
	// busy counts writes queued or being written; at zero the loop (the
	// only producer) writes itself.
	busy atomic.Int64

	mu       sync.Mutex
	finished []diskDone
	note     chan struct{} // a completion is waiting in finished

	snapDone chan SnapshotResult
}

// diskDone is one write's outcome.
type diskDone struct {
	w   *Write
	err error
}

// diskQueue bounds the writes queued for the disk writer; past it the
// loop waits (back pressure on proposals).
const diskQueue = 64

func newStorageDisk(st *Storage, maxBatch int, onBatch func(entries, bytes int, d time.Duration)) *storageDisk {
	d := &storageDisk{st: st, maxBatch: maxBatch, onBatch: onBatch,
		queue: make(chan *Write, diskQueue), done: make(chan struct{}), note: make(chan struct{}, 1),
		snapDone: make(chan SnapshotResult, 1)}
	go d.writer()
	return d
}

// Write implements Disk.
func (d *storageDisk) Write(w *Write) (bool, error) {
	if !w.Async && d.busy.Load() == 0 {
		// Nothing queued and nothing being written, and only the loop
		// queues: write here.
		return true, d.write(w)
	}
	d.busy.Add(1)
	d.queue <- w
	return false, nil
}

// take returns the completions reported since the last call.
func (d *storageDisk) take() []diskDone {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.finished
	d.finished = nil
	return out
}

func (d *storageDisk) report(ws []*Write, err error) {
	d.mu.Lock()
	for _, w := range ws {
		d.finished = append(d.finished, diskDone{w, err})
	}
	d.mu.Unlock()
	select {
	case d.note <- struct{}{}:
	default:
	}
}

// close stops the writer once it has carried out what it was handed.
func (d *storageDisk) close() {
	close(d.queue)
	<-d.done
}

func (d *storageDisk) writer() {
	defer close(d.done)
	var next *Write
	var failed error
	for {
		w := next
		next = nil
		if w == nil {
			var ok bool
			if w, ok = <-d.queue; !ok {
				return
			}
		}
		if failed != nil {
			d.report([]*Write{w}, failed)
			d.busy.Add(-1)
			continue
		}
		if !w.Async {
			err := d.write(w)
			failed = err
			d.report([]*Write{w}, err)
			d.busy.Add(-1)
			continue
		}
		batch := []*Write{w}
		entries, hs := w.Entries, w.HardState
	gather:
		for len(entries) < d.maxBatch*4 {
			select {
			case more, ok := <-d.queue:
				if !ok {
					break gather
				}
				if !more.Async || more.View != w.View {
					next = more
					break gather
				}
				batch = append(batch, more)
				entries = append(entries[:len(entries):len(entries)], more.Entries...)
				if more.HardState != nil {
					hs = more.HardState
				}
			default:
				break gather
			}
		}
		err := d.write(&Write{Entries: entries, HardState: hs, Sync: true})
		failed = err
		d.report(batch, err)
		d.busy.Add(-int64(len(batch)))
	}
}

// write carries out one write: the snapshot first, then the log and the
// hard state in one batch with one fsync.
func (d *storageDisk) write(w *Write) error {
	if s := w.Snapshot; s != nil {
		install := d.st.installStaged // received in chunks: it is on disk
		if s.Data != nil {
			install = func(meta vr.SnapshotMeta) error { return d.st.installSnapshot(meta, s.Data) }
		}
		if err := install(s.Meta); err != nil {
			return err
		}
	}
	if w.TruncateFrom == 0 && len(w.Entries) == 0 && w.HardState == nil {
		return nil // a barrier, or a snapshot alone
	}
	start := time.Now()
	if err := d.st.persistReady(w.TruncateFrom, w.Entries, w.HardState, w.Sync); err != nil {
		return err
	}
	if d.onBatch != nil && len(w.Entries) > 0 {
		bytes := 0
		for _, e := range w.Entries {
			bytes += len(e.Data)
		}
		d.onBatch(len(w.Entries), bytes, time.Since(start))
	}
	return nil
}

// SaveSnapshot implements Disk.
func (d *storageDisk) SaveSnapshot(meta vr.SnapshotMeta, data func() ([]byte, error)) {
	go func() {
		app, err := data()
		if err == nil {
			err = d.st.saveVRSnapshot(meta, app)
		}
		d.snapDone <- SnapshotResult{Meta: meta, Bytes: len(app), Err: err}
	}()
}

// FinishSnapshot implements Disk.
func (d *storageDisk) FinishSnapshot() SnapshotResult { return <-d.snapDone }

// LoadSnapshot implements Disk.
func (d *storageDisk) LoadSnapshot(index uint64) ([]byte, error) { return d.st.loadVRSnapshot(index) }

// ReadSnapshotChunk implements Disk.
func (d *storageDisk) ReadSnapshotChunk(index uint64, n uint32) ([]byte, ChunkInfo, error) {
	return d.st.ReadSnapshotChunk(index, n)
}

// StageSnapshotChunk implements Disk.
func (d *storageDisk) StageSnapshotChunk(meta vr.SnapshotMeta, info ChunkInfo, n uint32, data []byte) (uint32, error) {
	return d.st.StageSnapshotChunk(meta, info, n, data)
}

// Staged implements Disk.
func (d *storageDisk) Staged() (ChunkInfo, uint32, error) { return d.st.Staged() }
