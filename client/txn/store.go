package txn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// Version identifies one state of one row in a Store: compare-and-swap
// writes name the version they read. The zero Version is "no row".
type Version struct {
	// Instance tells apart rows of one key that were deleted and created
	// again (the cell's node instance), so that a version can never come
	// back.
	Instance int64
	// Generation counts the writes of this instance (the cell's content
	// generation).
	Generation int64
}

// ErrVersion is Store.Write's answer when the row is no longer at the
// version the caller read: someone else wrote it first; read and try again.
var ErrVersion = errors.New("txn: row changed since it was read")

// ErrRowTooLarge is returned when a row would outgrow its store's limit
// (the cell's 256 KiB per file): collect garbage or write less per row.
var ErrRowTooLarge = errors.New("txn: row too large")

// Store is where rows live: a map from key to row with single-row
// atomicity, Bigtable's row transactions. That is all the transaction
// protocol needs from storage, so it runs unchanged on any store that can
// do this (the cell, MemStore, or another).
type Store interface {
	// Read returns the row at key and its version; a missing row is the
	// empty row at the zero Version. The row returned is the caller's to
	// change.
	Read(ctx context.Context, key string) (*Row, Version, error)
	// Write replaces the row at key by r if the row is still at version
	// old, and fails with ErrVersion if it is not; a nil or empty r
	// deletes the row. It returns the row's new version (zero after a
	// delete). Any other error leaves the outcome unknown: read again to
	// learn it.
	Write(ctx context.Context, key string, old Version, r *Row) (Version, error)
	// Keys returns every key that has a row, sorted, without the meta row.
	Keys(ctx context.Context) ([]string, error)
}

// Liveness tells whether a worker may still be running transactions. A
// worker reported dead must never write again: the cell gives this by
// tying a worker's token to its session, which ends before its ephemeral
// token is deleted and can never write afterwards.
type Liveness interface {
	Alive(ctx context.Context, worker string) (bool, error)
}

// Oracle hands out strictly increasing timestamps (client.Client is one).
type Oracle interface {
	Timestamps(ctx context.Context, n int) (int64, error)
}

// Watcher is implemented by stores that can say when rows change, for
// observers: changed is called with the key of a row that may have
// changed, or with "" when anything may have (events were lost, or a
// worker died and rows it locked may be resolvable now).
type Watcher interface {
	Watch(ctx context.Context, changed func(key string)) (stop func(), err error)
}

// MemStore is a Store, Liveness, Watcher and RowLocker in memory, for tests of the
// protocol and as the model of what another store has to provide. Rows are
// kept encoded, so a MemStore checks the encoding as the cell does.
type MemStore struct {
	mu       sync.Mutex
	rows     map[string]memRow
	dead     map[string]bool
	next     int64
	watchers map[int]func(string)
	nextW    int
	locks    rowQueues // RowLocker (hot.go)
}

type memRow struct {
	b []byte
	v Version
}

// NewMemStore returns an empty MemStore in which every worker is alive
// until Kill.
func NewMemStore() *MemStore {
	return &MemStore{rows: map[string]memRow{}, dead: map[string]bool{}, watchers: map[int]func(string){}}
}

// Read implements Store.
func (m *MemStore) Read(ctx context.Context, key string) (*Row, Version, error) {
	m.mu.Lock()
	mr := m.rows[key]
	m.mu.Unlock()
	r, err := decodeRow(mr.b)
	if err != nil {
		return nil, Version{}, fmt.Errorf("row %q: %w", key, err)
	}
	return r, mr.v, nil
}

// Write implements Store.
func (m *MemStore) Write(ctx context.Context, key string, old Version, r *Row) (Version, error) {
	var b []byte
	if !r.isEmpty() {
		b = encodeRow(r)
	}
	m.mu.Lock()
	cur := m.rows[key]
	if cur.v != old {
		m.mu.Unlock()
		return Version{}, ErrVersion
	}
	var v Version
	switch {
	case b == nil:
		delete(m.rows, key)
	case old == (Version{}):
		m.next++
		v = Version{Instance: m.next, Generation: 1}
	default:
		v = Version{Instance: old.Instance, Generation: old.Generation + 1}
	}
	if b != nil {
		m.rows[key] = memRow{b: b, v: v}
	}
	ws := m.watcherList()
	m.mu.Unlock()
	for _, w := range ws {
		w(key)
	}
	return v, nil
}

// Keys implements Store.
func (m *MemStore) Keys(ctx context.Context) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ks []string
	for k := range m.rows {
		if k != metaKey {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks, nil
}

// Alive implements Liveness.
func (m *MemStore) Alive(ctx context.Context, worker string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.dead[worker], nil
}

// Kill marks worker dead, as a cell does when its session expires. The
// caller must not let the worker's DB write afterwards.
func (m *MemStore) Kill(worker string) {
	m.mu.Lock()
	m.dead[worker] = true
	ws := m.watcherList()
	m.mu.Unlock()
	for _, w := range ws {
		w("")
	}
}

// Watch implements Watcher: changed runs on the writer's goroutine.
func (m *MemStore) Watch(ctx context.Context, changed func(string)) (func(), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id := m.nextW
	m.nextW++
	m.watchers[id] = changed
	return func() {
		m.mu.Lock()
		delete(m.watchers, id)
		m.mu.Unlock()
	}, nil
}

func (m *MemStore) watcherList() []func(string) {
	ws := make([]func(string), 0, len(m.watchers))
	for _, w := range m.watchers {
		ws = append(ws, w)
	}
	return ws
}

// isEmpty reports whether the row holds nothing worth keeping.
func (r *Row) isEmpty() bool {
	if r == nil {
		return true
	}
	if r.Floor != 0 {
		return false
	}
	for _, c := range r.Cols {
		if !c.empty() {
			return false
		}
	}
	return true
}
