package txn

import (
	"container/list"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/rpc"
)

// CellStore keeps a table in a directory of the cell:
//
//	dir/meta            the meta row (the garbage-collection floor)
//	dir/rows/<key>      one file per row, its columns encoded in it
//	dir/workers/<id>    one ephemeral file per live worker
//	dir/hot/<key>       a lock file per row transactions queued for (hot.go)
//
// A row is read through an open handle, so a caching session answers
// repeated reads of an unchanged row from its cache (which the cell keeps
// exact), and written by one Multi that compares the file's instance and
// content generation: the cell's compare-and-swap is the row transaction.
// It is also the table's Liveness (a worker is alive while its file
// exists) and Watcher (the rows directory's CHILD_MODIFIED events).
type CellStore struct {
	s   *client.Session
	dir string

	mu      sync.Mutex
	handles map[string]*list.Element // path → element of lru (*openRow)
	lru     *list.List               // most recently used first
	max     int
	workers *client.Handle

	locks    cellRowLocks  // RowLocker (hot.go)
	lockWait time.Duration // bound on one wait for a row's lock
}

type openRow struct {
	path string
	h    *client.Handle
}

// NewCellStore returns the store of the table in dir, creating its
// directories if missing. At most maxOpen row handles are kept open
// (least recently used closed first; default 1024 when < 1).
func NewCellStore(ctx context.Context, s *client.Session, dir string, maxOpen int) (*CellStore, error) {
	if maxOpen < 1 {
		maxOpen = 1024
	}
	for _, d := range []string{dir, dir + "/rows", dir + "/workers", dir + "/hot"} {
		if _, err := s.Mkdir(ctx, d, client.MkdirOptions{Parents: true}); err != nil && !client.IsCode(err, chubby.ErrorCode_EXISTS) {
			return nil, fmt.Errorf("txn: table %s: %w", dir, err)
		}
	}
	w, err := s.Open(ctx, dir+"/workers", client.OpenOptions{})
	if err != nil {
		return nil, fmt.Errorf("txn: table %s: %w", dir, err)
	}
	return &CellStore{s: s, dir: dir, handles: map[string]*list.Element{}, lru: list.New(), max: maxOpen, workers: w,
		lockWait: DefaultConfig().LockWait}, nil
}

// Session returns the session the store acts with.
func (cs *CellStore) Session() *client.Session { return cs.s }

// path is the file of key: "" is the meta row.
func (cs *CellStore) path(key string) string {
	if key == metaKey {
		return cs.dir + "/meta"
	}
	return cs.dir + "/rows/" + escapeKey(key)
}

// Read implements Store.
func (cs *CellStore) Read(ctx context.Context, key string) (*Row, Version, error) {
	p := cs.path(key)
	for range 3 {
		h, err := cs.handle(ctx, p)
		if client.IsCode(err, chubby.ErrorCode_NOT_FOUND) {
			return &Row{}, Version{}, nil
		}
		if err != nil {
			return nil, Version{}, fmt.Errorf("txn: read row %q: %w", key, err)
		}
		b, st, err := h.GetContentsAndStat(ctx)
		if client.IsCode(err, chubby.ErrorCode_HANDLE_INVALID) {
			cs.forget(ctx, p, h) // deleted (and maybe created again) since opened
			continue
		}
		if err != nil {
			return nil, Version{}, fmt.Errorf("txn: read row %q: %w", key, err)
		}
		r, err := decodeRow(b)
		if err != nil {
			return nil, Version{}, fmt.Errorf("row %q: %w", key, err)
		}
		return r, Version{Instance: st.GetInstance(), Generation: st.GetContentGeneration()}, nil
	}
	return nil, Version{}, fmt.Errorf("txn: read row %q: re-created under us three times", key)
}

// Write implements Store.
func (cs *CellStore) Write(ctx context.Context, key string, old Version, r *Row) (Version, error) {
	p := cs.path(key)
	var cmps []client.Cmp
	if old == (Version{}) {
		cmps = []client.Cmp{client.CmpNotExists(p)}
	} else {
		cmps = []client.Cmp{client.CmpInstance(p, old.Instance), client.CmpGeneration(p, old.Generation)}
	}
	var op client.Op
	switch {
	case r.isEmpty() && old == (Version{}):
		return Version{}, nil // nothing to delete
	case r.isEmpty():
		op = client.OpDelete(p, false)
	case old == (Version{}):
		op = client.OpCreate(p, encodeRow(r))
	default:
		op = client.OpSet(p, encodeRow(r))
	}
	res, err := cs.s.Multi(ctx, cmps, []client.Op{op})
	switch {
	case client.IsCode(err, chubby.ErrorCode_TOO_LARGE):
		return Version{}, fmt.Errorf("%w: row %q: %w", ErrRowTooLarge, key, err)
	case err != nil:
		return Version{}, fmt.Errorf("txn: write row %q: %w", key, err)
	case !res.Succeeded:
		return Version{}, ErrVersion
	case r.isEmpty() || len(res.Stats) != 1:
		return Version{}, nil
	}
	st := res.Stats[0]
	return Version{Instance: st.GetInstance(), Generation: st.GetContentGeneration()}, nil
}

// Keys implements Store.
func (cs *CellStore) Keys(ctx context.Context) ([]string, error) {
	h, err := cs.handle(ctx, cs.dir+"/rows")
	if err != nil {
		return nil, fmt.Errorf("txn: list rows: %w", err)
	}
	es, err := h.ReadDir(ctx)
	if err != nil {
		return nil, fmt.Errorf("txn: list rows: %w", err)
	}
	ks := make([]string, 0, len(es))
	for _, e := range es {
		if k, ok := unescapeKey(e.GetName()); ok {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks, nil
}

// Alive implements Liveness: a worker is alive while its ephemeral file
// is in dir/workers. The listing comes from the session's cache when it
// holds it; a stale listing can only say "alive" too long, never "dead"
// too early, because a worker's id is never used again.
func (cs *CellStore) Alive(ctx context.Context, worker string) (bool, error) {
	es, err := cs.workers.ReadDir(ctx)
	if err != nil {
		return false, fmt.Errorf("txn: list workers: %w", err)
	}
	_, found := slices.BinarySearchFunc(es, worker, func(e *chubby.DirEntry, w string) int { return strings.Compare(e.GetName(), w) })
	return found, nil
}

// register creates worker's token, an ephemeral file of cs's session.
func (cs *CellStore) register(ctx context.Context, worker string, about []byte) error {
	_, err := cs.s.CreateFile(ctx, cs.dir+"/workers/"+worker, about, client.CreateOptions{Ephemeral: true})
	if err != nil {
		return fmt.Errorf("txn: register worker %s: %w", worker, err)
	}
	return nil
}

// unregister deletes worker's token: its locks become resolvable at once.
func (cs *CellStore) unregister(ctx context.Context, worker string) error {
	p := cs.dir + "/workers/" + worker
	_, err := cs.s.Multi(ctx, []client.Cmp{client.CmpExists(p)}, []client.Op{client.OpDelete(p, false)})
	return err
}

// Watch implements Watcher with a handle on the rows directory
// (CHILD_ADDED, CHILD_MODIFIED, CHILD_REMOVED) and one on the workers
// directory (CHILD_REMOVED: a worker died, its locks may be resolvable).
func (cs *CellStore) Watch(ctx context.Context, changed func(string)) (func(), error) {
	const rowMask = chubby.EVENT_MASK_CHILD_ADDED | chubby.EVENT_MASK_CHILD_MODIFIED | chubby.EVENT_MASK_CHILD_REMOVED
	rows, err := cs.s.Open(ctx, cs.dir+"/rows", client.OpenOptions{EventMask: rowMask})
	if err != nil {
		return nil, fmt.Errorf("txn: watch rows: %w", err)
	}
	workers, err := cs.s.Open(ctx, cs.dir+"/workers", client.OpenOptions{EventMask: chubby.EVENT_MASK_CHILD_REMOVED})
	if err != nil {
		rows.Close(ctx)
		return nil, fmt.Errorf("txn: watch workers: %w", err)
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		var lost uint64
		for {
			select {
			case <-wctx.Done():
				return
			case ev, ok := <-rows.Events():
				if !ok {
					changed("")
					return
				}
				if n := rows.DroppedEvents(); n != lost || ev.Kind == chubby.EventKind_EVENTS_LOST {
					lost = n
					changed("")
				} else if k, ok := unescapeKey(ev.Child); ok {
					changed(k)
				}
			case _, ok := <-workers.Events():
				if !ok {
					return
				}
				changed("")
			}
		}
	}()
	return func() {
		cancel()
		<-done
		rows.Close(context.Background())
		workers.Close(context.Background())
	}, nil
}

// handle returns an open handle on p, opening it if needed; the least
// recently used handle beyond the bound is closed.
func (cs *CellStore) handle(ctx context.Context, p string) (*client.Handle, error) {
	cs.mu.Lock()
	if e, ok := cs.handles[p]; ok {
		cs.lru.MoveToFront(e)
		h := e.Value.(*openRow).h
		cs.mu.Unlock()
		return h, nil
	}
	cs.mu.Unlock()
	h, err := cs.s.Open(ctx, p, client.OpenOptions{})
	if err != nil {
		return nil, err
	}
	cs.mu.Lock()
	if e, ok := cs.handles[p]; ok { // opened twice concurrently: keep one
		cs.mu.Unlock()
		go h.Close(context.WithoutCancel(ctx))
		return e.Value.(*openRow).h, nil
	}
	cs.handles[p] = cs.lru.PushFront(&openRow{path: p, h: h})
	var evict []*client.Handle
	for cs.lru.Len() > cs.max {
		e := cs.lru.Back()
		cs.lru.Remove(e)
		o := e.Value.(*openRow)
		delete(cs.handles, o.path)
		evict = append(evict, o.h)
	}
	cs.mu.Unlock()
	for _, h := range evict {
		go h.Close(context.WithoutCancel(ctx))
	}
	return h, nil
}

// forget drops h, p's handle, after it went invalid.
func (cs *CellStore) forget(ctx context.Context, p string, h *client.Handle) {
	cs.mu.Lock()
	if e, ok := cs.handles[p]; ok && e.Value.(*openRow).h == h {
		cs.lru.Remove(e)
		delete(cs.handles, p)
	}
	cs.mu.Unlock()
	go h.Close(context.WithoutCancel(ctx))
}

// Close closes the store's handles (not its session).
func (cs *CellStore) Close(ctx context.Context) {
	cs.mu.Lock()
	hs := make([]*client.Handle, 0, cs.lru.Len()+1)
	for e := cs.lru.Front(); e != nil; e = e.Next() {
		hs = append(hs, e.Value.(*openRow).h)
	}
	cs.handles, cs.lru = map[string]*list.Element{}, list.New()
	cs.mu.Unlock()
	cs.locks.mu.Lock()
	for _, h := range cs.locks.open {
		hs = append(hs, h)
	}
	cs.locks.open, cs.locks.used = nil, nil
	cs.locks.mu.Unlock()
	hs = append(hs, cs.workers)
	// All at once; errors are dropped: a handle of a session that is gone
	// went with it.
	fs := make([]*rpc.Future[struct{}], len(hs))
	for i, h := range hs {
		fs[i] = h.CloseAsync(ctx)
	}
	for _, f := range fs {
		f.Wait(ctx)
	}
}

// escapeKey turns a row key into a file name: bytes in [A-Za-z0-9-] stay,
// every other byte is "_" and two hex digits. The mapping is one to one,
// and no name it makes is "." or "..".
func escapeKey(k string) string {
	var b strings.Builder
	const hex = "0123456789abcdef"
	for i := 0; i < len(k); i++ {
		c := k[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('_')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// unescapeKey inverts escapeKey; ok is false for a name it cannot have made.
func unescapeKey(name string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c != '_' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(name) {
			return "", false
		}
		hi, lo := unhex(name[i+1]), unhex(name[i+2])
		if hi < 0 || lo < 0 {
			return "", false
		}
		b.WriteByte(byte(hi<<4 | lo))
		i += 2
	}
	k := b.String()
	return k, k != "" && escapeKey(k) == name
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c - 'a' + 10)
	}
	return -1
}
