package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// StateMachine is what a log drives: entries are applied in log order, from
// one goroutine, and the state can be captured and restored whole.
type StateMachine interface {
	// Apply applies the entry at index and returns its result for the
	// proposer. It must be deterministic and must not fail: a command the
	// state machine refuses is a result, not an error.
	Apply(index uint64, entry []byte) any
	// Snapshot returns the state after the last applied entry.
	Snapshot() []byte
	// Restore replaces the state with a snapshot taken at index.
	Restore(index uint64, snapshot []byte) error
}

// LocalConfig configures a one-replica log. Zero fields take the defaults.
type LocalConfig struct {
	// MaxBatch bounds the entries written with one fsync. Default 1024.
	MaxBatch int
	// MaxBatchBytes bounds the bytes written with one fsync. Default 8 MiB.
	MaxBatchBytes int
	// MaxQueue bounds the proposals waiting for the next batch; past it
	// Propose fails at once with ErrOverloaded. Default 16384.
	MaxQueue int
	// SnapshotEvery takes a snapshot (and truncates the log behind it)
	// after this many applied entries. Default 50,000.
	SnapshotEvery uint64
	Logger        *slog.Logger
	// OnBatch, if set, is told the size and fsync time of every batch
	// (for metrics).
	OnBatch func(entries int, bytes int, fsync time.Duration)
}

func (c *LocalConfig) setDefaults() {
	if c.MaxBatch <= 0 {
		c.MaxBatch = 1024
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = 8 << 20
	}
	if c.MaxQueue <= 0 {
		c.MaxQueue = 16384
	}
	if c.SnapshotEvery == 0 {
		c.SnapshotEvery = 50000
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

var (
	// ErrOverloaded: the proposal queue is full; the caller should retry later.
	ErrOverloaded = errors.New("replica: proposal queue full")
	// ErrStopped: the log is closed or failed; nothing more is accepted.
	ErrStopped = errors.New("replica: log stopped")
)

// Local is the log of a one-replica cell. A proposal is appended to the
// Badger log with others in a batch, fsynced once, applied, and only then
// answered, so a command is durable before its caller hears success. A
// restart restores the latest snapshot and replays the log after it, which
// rebuilds exactly the same state. The replicated log (view-change
// protocol) offers the same Propose.
type Local struct {
	cfg   LocalConfig
	st    *Storage
	sm    StateMachine
	queue chan *proposal
	stop  chan struct{}
	done  chan struct{}

	mu       sync.Mutex
	applied  uint64
	snapshot uint64
	err      error // set when the disk failed; the log is stopped for good
}

type proposal struct {
	entry []byte
	reply chan proposalResult
}

type proposalResult struct {
	index uint64
	value any
	err   error
}

// StartLocal restores the state machine from storage (snapshot, then every
// entry after it) and starts accepting proposals.
func StartLocal(st *Storage, sm StateMachine, cfg LocalConfig) (*Local, error) {
	cfg.setDefaults()
	l := &Local{
		cfg:   cfg,
		st:    st,
		sm:    sm,
		queue: make(chan *proposal, cfg.MaxQueue),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	idx, snap, ok, err := st.LoadSnapshot()
	if err != nil {
		return nil, fmt.Errorf("load snapshot: %w", err)
	}
	if ok {
		if err := sm.Restore(idx, snap); err != nil {
			return nil, fmt.Errorf("restore snapshot at %d: %w", idx, err)
		}
		l.applied, l.snapshot = idx, idx
	}
	first, last := st.Bounds()
	if first != l.applied+1 && last >= first {
		return nil, fmt.Errorf("%w: log starts at %d but the snapshot ends at %d", ErrCorrupt, first, l.applied)
	}
	const replayChunk = 4096
	for from := first; from <= last; from += replayChunk {
		to := min(from+replayChunk-1, last)
		entries, err := st.Entries(from, to)
		if err != nil {
			return nil, fmt.Errorf("replay: %w", err)
		}
		for i, e := range entries {
			sm.Apply(from+uint64(i), e)
		}
		l.applied = to
	}
	cfg.Logger.Info("log restored", "snapshot", l.snapshot, "replayed", l.applied-l.snapshot, "applied", l.applied)
	go l.run()
	return l, nil
}

// Propose appends entry to the log and returns the state machine's result
// once it is durable and applied. If ctx ends first, Propose returns
// ctx.Err() but the entry may still be applied.
func (l *Local) Propose(ctx context.Context, entry []byte) (any, error) {
	if len(entry) > MaxEntryBytes {
		return nil, fmt.Errorf("propose: entry of %d bytes over the %d limit", len(entry), MaxEntryBytes)
	}
	p := &proposal{entry: entry, reply: make(chan proposalResult, 1)}
	select {
	case <-l.stop:
		return nil, l.stoppedErr()
	default:
	}
	select {
	case l.queue <- p:
	default:
		return nil, ErrOverloaded
	}
	select {
	case r := <-p.reply:
		return r.value, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.done:
		select {
		case r := <-p.reply:
			return r.value, r.err
		default:
			return nil, l.stoppedErr()
		}
	}
}

// Applied returns the index of the last applied entry.
func (l *Local) Applied() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.applied
}

// Close stops the log. Proposals not yet written fail with ErrStopped.
func (l *Local) Close() error {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
	return nil
}

func (l *Local) stoppedErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return fmt.Errorf("%w: %w", ErrStopped, l.err)
	}
	return ErrStopped
}

func (l *Local) run() {
	defer close(l.done)
	defer l.failQueued()
	batch := make([]*proposal, 0, l.cfg.MaxBatch)
	entries := make([][]byte, 0, l.cfg.MaxBatch)
	for {
		batch, entries = batch[:0], entries[:0]
		select {
		case p := <-l.queue:
			batch = append(batch, p)
		case <-l.stop:
			return
		}
		bytes := len(batch[0].entry)
	drain:
		for len(batch) < l.cfg.MaxBatch && bytes < l.cfg.MaxBatchBytes {
			select {
			case p := <-l.queue:
				batch = append(batch, p)
				bytes += len(p.entry)
			default:
				break drain
			}
		}
		for _, p := range batch {
			entries = append(entries, p.entry)
		}
		start := time.Now()
		if err := l.st.Append(entries); err != nil {
			// A replica whose disk fails must not go on as if it had
			// persisted: stop for good, fail everything.
			l.cfg.Logger.Error("log append failed; the log stops", "err", err)
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
			for _, p := range batch {
				p.reply <- proposalResult{err: fmt.Errorf("%w: %w", ErrStopped, err)}
			}
			select {
			case <-l.stop:
			default:
				close(l.stop)
			}
			return
		}
		if l.cfg.OnBatch != nil {
			l.cfg.OnBatch(len(batch), bytes, time.Since(start))
		}
		l.mu.Lock()
		base := l.applied
		l.mu.Unlock()
		for i, p := range batch {
			idx := base + uint64(i) + 1
			v := l.sm.Apply(idx, p.entry)
			p.reply <- proposalResult{index: idx, value: v}
		}
		l.mu.Lock()
		l.applied = base + uint64(len(batch))
		applied, snap := l.applied, l.snapshot
		l.mu.Unlock()
		if applied-snap >= l.cfg.SnapshotEvery {
			l.takeSnapshot(applied)
		}
	}
}

func (l *Local) takeSnapshot(applied uint64) {
	start := time.Now()
	data := l.sm.Snapshot()
	if err := l.st.SaveSnapshot(applied, data); err != nil {
		// Not fatal: the log still holds everything; try again later.
		l.cfg.Logger.Error("snapshot failed", "index", applied, "err", err)
		return
	}
	l.mu.Lock()
	l.snapshot = applied
	l.mu.Unlock()
	l.cfg.Logger.Info("snapshot saved", "index", applied, "bytes", len(data), "took", time.Since(start))
}

func (l *Local) failQueued() {
	for {
		select {
		case p := <-l.queue:
			p.reply <- proposalResult{err: l.stoppedErr()}
		default:
			return
		}
	}
}
