package client

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/cloudwego/kitex/client/callopt"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/rpc"
)

// OpenOptions says how Session.Open opens (and maybe creates) a node.
type OpenOptions struct {
	// Mode is READ (the default when zero: read, take locks) or READ_WRITE
	// (also write contents and delete).
	Mode chubby.OpenMode
	// Create is OPEN_EXISTING (the default when zero: NOT_FOUND if missing),
	// OPEN_OR_CREATE (create a file if missing) or CREATE_NEW (EXISTS if
	// present; always creates when Sequential).
	Create chubby.CreateMode
	// Ephemeral, on create: the file is deleted when the session ends.
	Ephemeral bool
	// Sequential, on create: a 10-digit per-parent counter is appended to
	// the name; Handle.Path tells the name actually created.
	Sequential bool
	// InitialContent, on create: the file's first content.
	InitialContent []byte
	// EventMask chooses the events the handle receives on Handle.Events:
	// chubby.EVENT_MASK_* bits OR'd together (chubby.EVENT_MASK_ALL for
	// every kind); 0 asks for none. Bits outside EVENT_MASK_ALL are
	// INVALID_ARGUMENT.
	EventMask int32
}

// MkdirOptions says how Session.Mkdir creates a directory.
type MkdirOptions struct {
	// Parents creates missing parents; an existing directory is then not an error.
	Parents bool
	// Ephemeral: the directory is deleted when it is empty after the session ends.
	Ephemeral bool
}

// CreateOptions says how Session.CreateFile creates a file.
type CreateOptions struct {
	Ephemeral   bool // deleted when the session ends
	Sequential  bool // append a 10-digit per-parent counter to the name
	MakeParents bool // create missing parent directories (permanent ones)
}

// Handle is an open node: a session's reference to one instance
// of the node at its path. If the node is deleted (and perhaps re-created),
// calls on the handle fail with HANDLE_INVALID. Safe for concurrent use.
type Handle struct {
	s       *Session
	h       *chubby.Handle
	created bool
	events  *eventQueue[Event] // closed at once when the handle has no event mask

	mu   sync.Mutex
	stat *chubby.Stat // the latest Stat any call on this handle returned
	// poison is cancelled (with ErrPoisoned) by Poison; made on first use.
	poison       context.Context
	poisonCancel context.CancelCauseFunc
}

// Open opens the node at path (see OpenOptions). It changes the cell (a new
// handle, maybe a new node) and is exactly-once, like SetContents: resent
// after a lost reply or a failover, it is applied once, and the resend gets
// the first attempt's handle.
func (s *Session) Open(ctx context.Context, path string, opts OpenOptions) (*Handle, error) {
	return s.openCall(path, opts)(ctx)
}

// OpenAsync is the asynchronous form of Open.
func (s *Session) OpenAsync(ctx context.Context, path string, opts OpenOptions) *rpc.Future[*Handle] {
	return rpc.Go(ctx, s.openCall(path, opts))
}

// openCall is the call Open makes on the caller's goroutine and
// OpenAsync on a goroutine of its own.
func (s *Session) openCall(path string, opts OpenOptions) func(context.Context) (*Handle, error) {
	return func(ctx context.Context) (*Handle, error) {
		req := &chubby.OpenRequest{
			Session:        s.id,
			Path:           path,
			Mode:           opts.Mode,
			Create:         opts.Create,
			InitialContent: opts.InitialContent,
		}
		if req.Mode == 0 {
			req.Mode = chubby.OpenMode_READ
		}
		if req.Create == 0 {
			req.Create = chubby.CreateMode_OPEN_EXISTING
		}
		if opts.Ephemeral {
			req.Ephemeral = boolPtr(true)
		}
		if opts.Sequential {
			req.Sequential = boolPtr(true)
		}
		if opts.EventMask != 0 {
			req.EventMask = &opts.EventMask
			// An event may overtake this call's reply: the session keeps
			// such events until the handle is known.
			s.beginOpen()
		}
		r, err := sessionCall(ctx, s, s.onceSpec("open", path, func(r *chubby.RequestID) { req.Rid = r }),
			func(ctx context.Context, o ...callopt.Option) (*chubby.OpenResponse, error) {
				return s.c.kc.Open(ctx, req, o...)
			})
		var h *Handle
		if err == nil {
			h = &Handle{s: s, h: r.GetHandle(), created: r.GetCreated(), stat: r.GetStat(),
				events: newEventQueue[Event](HandleEventBuffer)}
			if opts.EventMask == 0 {
				h.events.close()
			}
		}
		if opts.EventMask != 0 {
			s.endOpen(h)
		}
		if err != nil {
			return nil, err
		}
		return h, nil
	}
}

// Mkdir creates the directory path and returns its Stat.
func (s *Session) Mkdir(ctx context.Context, path string, opts MkdirOptions) (*chubby.Stat, error) {
	return s.mkdirCall(path, opts)(ctx)
}

// MkdirAsync is the asynchronous form of Mkdir.
func (s *Session) MkdirAsync(ctx context.Context, path string, opts MkdirOptions) *rpc.Future[*chubby.Stat] {
	return rpc.Go(ctx, s.mkdirCall(path, opts))
}

// mkdirCall is the call Mkdir makes on the caller's goroutine and
// MkdirAsync on a goroutine of its own.
func (s *Session) mkdirCall(path string, opts MkdirOptions) func(context.Context) (*chubby.Stat, error) {
	return func(ctx context.Context) (*chubby.Stat, error) {
		req := &chubby.MkdirRequest{Session: s.id, Path: path}
		if opts.Parents {
			req.Parents = boolPtr(true)
		}
		if opts.Ephemeral {
			req.Ephemeral = boolPtr(true)
		}
		return sessionCall(ctx, s, s.onceSpec("mkdir", path, func(r *chubby.RequestID) { req.Rid = r }),
			func(ctx context.Context, o ...callopt.Option) (*chubby.Stat, error) {
				return s.c.kc.Mkdir(ctx, req, o...)
			})
	}
}

// CreateFile creates the file path with content in one call, without a
// handle, and returns its Stat (whose Path has the counter when Sequential).
func (s *Session) CreateFile(ctx context.Context, path string, content []byte, opts CreateOptions) (*chubby.Stat, error) {
	return s.createFileCall(path, content, opts)(ctx)
}

// CreateFileAsync is the asynchronous form of CreateFile.
func (s *Session) CreateFileAsync(ctx context.Context, path string, content []byte, opts CreateOptions) *rpc.Future[*chubby.Stat] {
	return rpc.Go(ctx, s.createFileCall(path, content, opts))
}

// createFileCall is the call CreateFile makes on the caller's goroutine and
// CreateFileAsync on a goroutine of its own.
func (s *Session) createFileCall(path string, content []byte, opts CreateOptions) func(context.Context) (*chubby.Stat, error) {
	return func(ctx context.Context) (*chubby.Stat, error) {
		req := &chubby.CreateFileRequest{Session: s.id, Path: path, Content: content}
		if req.Content == nil {
			req.Content = []byte{}
		}
		if opts.Ephemeral {
			req.Ephemeral = boolPtr(true)
		}
		if opts.Sequential {
			req.Sequential = boolPtr(true)
		}
		if opts.MakeParents {
			req.MakeParents = boolPtr(true)
		}
		return sessionCall(ctx, s, s.onceSpec("create", path, func(r *chubby.RequestID) { req.Rid = r }),
			func(ctx context.Context, o ...callopt.Option) (*chubby.Stat, error) {
				return s.c.kc.CreateFile(ctx, req, o...)
			})
	}
}

func (s *Session) spec(op, path string, class retryClass) callSpec {
	return callSpec{op: op, path: path, class: class, timeout: s.c.cfg.CallTimeout}
}

// onceSpec is the spec of a call made exactly-once by its RequestID, which
// setRID puts into the request.
func (s *Session) onceSpec(op, path string, setRID func(*chubby.RequestID)) callSpec {
	sp := s.spec(op, path, retryOnce)
	sp.setRID = setRID
	return sp
}

// Path returns the path of the node the handle names (with the counter, for
// a node created Sequential).
func (h *Handle) Path() string { return h.h.GetPath() }

// Session returns the session the handle belongs to.
func (h *Handle) Session() *Session { return h.s }

// Created reports whether Open created the node.
func (h *Handle) Created() bool { return h.created }

// Events returns the handle's event channel: the events its
// OpenOptions.EventMask asked for, in the order the cell applied the
// changes, each once (also across a failover of the cell), and
// EVENTS_LOST when the cell dropped some (see EventLostEvents). It is the
// same channel on every call. It is closed after HANDLE_INVALID (the node
// was deleted: no event follows), when the handle is closed, and when the
// session ends; for a handle opened without an event mask it is closed
// from the start. The channel holds HandleEventBuffer events; when the
// application does not keep up, the oldest undelivered event is dropped
// (DroppedEvents counts them) and the KeepAlive loop never waits.
func (h *Handle) Events() <-chan Event { return h.events.ch }

// DroppedEvents returns how many of the handle's events were dropped
// because the application did not read Events fast enough.
func (h *Handle) DroppedEvents() uint64 { return h.events.droppedCount() }

// Stat returns the latest metadata the client has seen for the node: from
// Open, or from a later GetStat, GetContentsAndStat or SetContents on this
// handle. It makes no call, so it may be out of date; GetStat asks the cell.
func (h *Handle) Stat() *chubby.Stat {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stat
}

func (h *Handle) remember(st *chubby.Stat) {
	if st == nil {
		return
	}
	h.mu.Lock()
	h.stat = st
	h.mu.Unlock()
}

func (h *Handle) req() *chubby.HandleRequest { return &chubby.HandleRequest{Handle: h.h} }

// GetContentsAndStat reads the file's content and metadata in one call.
func (h *Handle) GetContentsAndStat(ctx context.Context) ([]byte, *chubby.Stat, error) {
	if b, st, ok := h.cachedFile(); ok { // a hit needs no goroutine
		return b, st, nil
	}
	r, err := handleDo(h, "read", ctx, h.getContentsAndStatCall())
	if err != nil {
		return nil, nil, err
	}
	return r.GetContent(), r.GetStat(), nil
}

// GetContentsAndStatAsync is the asynchronous form of GetContentsAndStat.
// With the cache on, a safe session answers from its cache when it holds
// the node (a hit makes no call), and caches what the cell lets it.
func (h *Handle) GetContentsAndStatAsync(ctx context.Context) *rpc.Future[*chubby.GetContentsAndStatResponse] {
	return handleGo(h, "read", ctx, h.getContentsAndStatCall())
}

// getContentsAndStatCall is the call GetContentsAndStat makes on the caller's goroutine and
// GetContentsAndStatAsync on a goroutine of its own.
func (h *Handle) getContentsAndStatCall() func(context.Context) (*chubby.GetContentsAndStatResponse, error) {
	return func(ctx context.Context) (*chubby.GetContentsAndStatResponse, error) {
		return h.readFile(ctx)
	}
}

// cachedFile serves a read from the cache when it may: the handle is not
// poisoned, caching is on and the session is safe.
func (h *Handle) cachedFile() ([]byte, *chubby.Stat, bool) {
	if h.isPoisoned() || !h.s.cacheUsable() {
		return nil, nil, false
	}
	// A miss is counted by the call that follows.
	b, st, ok := h.s.cache.file(h.Path(), h.h.GetInstance(), false)
	if ok {
		h.remember(st)
	}
	return b, st, ok
}

func (h *Handle) isPoisoned() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.poison != nil && h.poison.Err() != nil
}

// readFile is GetContentsAndStat through the cache.
func (h *Handle) readFile(ctx context.Context) (*chubby.GetContentsAndStatResponse, error) {
	s := h.s
	usable := s.cacheUsable()
	if usable {
		if b, st, ok := s.cache.file(h.Path(), h.h.GetInstance(), true); ok {
			h.remember(st)
			return &chubby.GetContentsAndStatResponse{Content: b, Stat: st}, nil
		}
	} else if s.caching {
		s.cache.misses.Add(1)
	}
	req := h.req()
	gen := s.cache.generation()
	if usable {
		req.Cache = boolPtr(true)
	}
	r, err := sessionCall(ctx, s, s.spec("read", h.Path(), retrySafe),
		func(ctx context.Context, o ...callopt.Option) (*chubby.GetContentsAndStatResponse, error) {
			return s.c.kc.GetContentsAndStat(ctx, req, o...)
		})
	if err != nil {
		return r, err
	}
	h.remember(r.GetStat())
	if r.GetCacheable() && s.cacheUsable() {
		s.cache.fillFile(h.Path(), h.h.GetInstance(), gen, append([]byte(nil), r.GetContent()...), ageStat(r.GetStat(), 0))
	}
	return r, nil
}

// GetStat reads the node's metadata.
func (h *Handle) GetStat(ctx context.Context) (*chubby.Stat, error) {
	if _, st, ok := h.cachedFile(); ok {
		return st, nil
	}
	return handleDo(h, "stat", ctx, h.getStatCall())
}

// GetStatAsync is the asynchronous form of GetStat. With the cache on, a
// file's Stat comes from the cache, and a miss reads (and caches) content
// and Stat in one call.
func (h *Handle) GetStatAsync(ctx context.Context) *rpc.Future[*chubby.Stat] {
	return handleGo(h, "stat", ctx, h.getStatCall())
}

// getStatCall is the call GetStat makes on the caller's goroutine and
// GetStatAsync on a goroutine of its own.
func (h *Handle) getStatCall() func(context.Context) (*chubby.Stat, error) {
	return func(ctx context.Context) (*chubby.Stat, error) {
		if last := h.Stat(); h.s.caching && last != nil && last.GetKind() == chubby.NodeKind_FILE {
			r, err := h.readFile(ctx)
			if err != nil {
				return nil, err
			}
			return r.GetStat(), nil
		}
		st, err := sessionCall(ctx, h.s, h.s.spec("stat", h.Path(), retrySafe),
			func(ctx context.Context, o ...callopt.Option) (*chubby.Stat, error) {
				return h.s.c.kc.GetStat(ctx, h.req(), o...)
			})
		if err == nil {
			h.remember(st)
		}
		return st, err
	}
}

// ReadDir lists the directory's children, sorted by name: all of them,
// however many (up to the cell's limit on a directory's entries). A
// listing too big for one reply is read in pages (ReadDirRequest.after);
// the set of names is one snapshot — the directory's content generation,
// which every child added or removed bumps, is the same on every page, or
// the listing starts again, at most maxReadDirAttempts times, then fails
// with ErrDirChanging — and each entry's Stat is as of the page it came
// in. Only a listing that fits one page is cached.
func (h *Handle) ReadDir(ctx context.Context) ([]*chubby.DirEntry, error) {
	return handleDo(h, "readdir", ctx, h.readDirCall())
}

// ReadDirAsync is the asynchronous form of ReadDir. With the cache on, a
// safe session answers from its cache when it holds the listing.
func (h *Handle) ReadDirAsync(ctx context.Context) *rpc.Future[[]*chubby.DirEntry] {
	return handleGo(h, "readdir", ctx, h.readDirCall())
}

// maxReadDirAttempts bounds how often ReadDir starts a paged listing again
// because the directory's children changed between its pages.
const maxReadDirAttempts = 8

// readDirCall is the call ReadDir makes on the caller's goroutine and
// ReadDirAsync on a goroutine of its own.
func (h *Handle) readDirCall() func(context.Context) ([]*chubby.DirEntry, error) {
	return func(ctx context.Context) ([]*chubby.DirEntry, error) {
		s := h.s
		usable := s.cacheUsable()
		if usable {
			if es, ok := s.cache.dir(h.Path(), h.h.GetInstance()); ok {
				return es, nil
			}
		} else if s.caching {
			s.cache.misses.Add(1)
		}
		gen := s.cache.generation()
		first, err := h.readDirPage(ctx, "", usable)
		if err != nil {
			return nil, err
		}
		if !first.GetMore() {
			if first.GetCacheable() && s.cacheUsable() {
				cp := make([]*chubby.DirEntry, len(first.GetEntries()))
				for i, d := range first.GetEntries() {
					cp[i] = &chubby.DirEntry{Name: d.Name, Stat: ageStat(d.Stat, 0)}
				}
				s.cache.fillDir(h.Path(), h.h.GetInstance(), gen, cp)
			}
			return first.GetEntries(), nil
		}
		for attempt := 1; ; attempt++ {
			es, ok, err := h.readDirRest(ctx, first)
			if err != nil || ok {
				return es, err
			}
			if attempt == maxReadDirAttempts {
				return nil, ErrDirChanging
			}
			if first, err = h.readDirPage(ctx, "", false); err != nil {
				return nil, err
			}
		}
	}
}

// readDirRest reads the pages after first and returns the whole listing;
// ok is false when the directory's children changed since first (its
// content generation differs on a later page).
func (h *Handle) readDirRest(ctx context.Context, first *chubby.ReadDirResponse) (es []*chubby.DirEntry, ok bool, err error) {
	es = slices.Clone(first.GetEntries())
	for r := first; r.GetMore(); {
		if len(r.GetEntries()) == 0 {
			return nil, false, newError(chubby.ErrorCode_INTERNAL, "ReadDir page says more but holds no entry")
		}
		after := r.GetEntries()[len(r.GetEntries())-1].GetName()
		if r, err = h.readDirPage(ctx, after, false); err != nil {
			return nil, false, err
		}
		if r.GetContentGeneration() != first.GetContentGeneration() {
			return nil, false, nil
		}
		es = append(es, r.GetEntries()...)
	}
	return es, true, nil
}

// readDirPage reads one page of the listing: the entries after after.
func (h *Handle) readDirPage(ctx context.Context, after string, cache bool) (*chubby.ReadDirResponse, error) {
	s := h.s
	req := &chubby.ReadDirRequest{Handle: h.h}
	if after != "" {
		req.After = &after
	}
	if cache {
		req.Cache = boolPtr(true)
	}
	return sessionCall(ctx, s, s.spec("readdir", h.Path(), retrySafe),
		func(ctx context.Context, o ...callopt.Option) (*chubby.ReadDirResponse, error) {
			return s.c.kc.ReadDir(ctx, req, o...)
		})
}

// SetOption modifies a SetContents call.
type SetOption struct {
	expectedGeneration *int64
}

// IfGeneration makes SetContents a compare-and-swap: it succeeds only if the
// file's content generation is still gen, and fails with GENERATION_MISMATCH
// otherwise.
func IfGeneration(gen int64) SetOption { return SetOption{expectedGeneration: &gen} }

// SetContents replaces the file's content (the handle must be READ_WRITE)
// and returns the new Stat. It is exactly-once: resent after a lost reply
// or a failover, it is applied once (see the package doc).
func (h *Handle) SetContents(ctx context.Context, content []byte, opts ...SetOption) (*chubby.Stat, error) {
	return handleDo(h, "write", ctx, h.setContentsCall(content, opts...))
}

// SetContentsAsync is the asynchronous form of SetContents.
func (h *Handle) SetContentsAsync(ctx context.Context, content []byte, opts ...SetOption) *rpc.Future[*chubby.Stat] {
	return handleGo(h, "write", ctx, h.setContentsCall(content, opts...))
}

// setContentsCall is the call SetContents makes on the caller's goroutine and
// SetContentsAsync on a goroutine of its own.
func (h *Handle) setContentsCall(content []byte, opts ...SetOption) func(context.Context) (*chubby.Stat, error) {
	return func(ctx context.Context) (*chubby.Stat, error) {
		req := &chubby.SetContentsRequest{Handle: h.h, Content: content}
		if req.Content == nil {
			req.Content = []byte{}
		}
		for _, o := range opts {
			if o.expectedGeneration != nil {
				req.ExpectedGeneration = o.expectedGeneration
			}
		}
		// Write-through: our copy goes now and again when the write is done
		// (the cell has invalidated it too before the write committed).
		h.s.cache.drop(h.Path())
		defer h.s.cache.drop(h.Path())
		st, err := sessionCall(ctx, h.s, h.s.onceSpec("write", h.Path(), func(r *chubby.RequestID) { req.Rid = r }),
			func(ctx context.Context, o ...callopt.Option) (*chubby.Stat, error) {
				return h.s.c.kc.SetContents(ctx, req, o...)
			})
		if err == nil {
			h.remember(st)
		}
		return st, err
	}
}

// Delete deletes the node (the handle must be READ_WRITE); a non-empty
// directory only when recursive.
func (h *Handle) Delete(ctx context.Context, recursive bool) error {
	_, err := handleDo(h, "delete", ctx, h.deleteCall(recursive))
	return err
}

// DeleteAsync is the asynchronous form of Delete.
func (h *Handle) DeleteAsync(ctx context.Context, recursive bool) *rpc.Future[struct{}] {
	return handleGo(h, "delete", ctx, h.deleteCall(recursive))
}

// deleteCall is the call Delete makes on the caller's goroutine and
// DeleteAsync on a goroutine of its own.
func (h *Handle) deleteCall(recursive bool) func(context.Context) (struct{}, error) {
	return func(ctx context.Context) (struct{}, error) {
		req := &chubby.DeleteRequest{Handle: h.h}
		if recursive {
			req.Recursive = boolPtr(true)
		}
		h.s.cache.dropTree(h.Path())
		defer h.s.cache.dropTree(h.Path())
		return sessionCall(ctx, h.s, h.s.onceSpec("delete", h.Path(), func(r *chubby.RequestID) { req.Rid = r }),
			func(ctx context.Context, o ...callopt.Option) (struct{}, error) {
				return struct{}{}, h.s.c.kc.Delete(ctx, req, o...)
			})
	}
}

// NoLockDelay, as LockOptions.LockDelay, asks for no lock-delay at all.
const NoLockDelay time.Duration = -1

// LockOptions modifies Acquire and TryAcquire.
type LockOptions struct {
	// LockDelay is how long the lock stays unavailable to others when this
	// session ends while holding it without releasing it, so that late
	// messages from the dead holder cannot interleave with the next
	// holder's. Zero means the cell's default (chubby.DEFAULT_LOCK_DELAY_MS);
	// NoLockDelay means none; at most chubby.MAX_LOCK_DELAY_MS.
	// Rounded up to whole milliseconds.
	LockDelay time.Duration
}

func (o LockOptions) lockDelayMs() *int64 {
	switch {
	case o.LockDelay == 0:
		return nil
	case o.LockDelay < 0:
		return int64Ptr(0)
	}
	return int64Ptr(ceilMs(o.LockDelay))
}

// Acquire takes the node's lock in mode (EXCLUSIVE or SHARED), waiting in
// FIFO order behind other waiters for at most wait (rounded up to whole
// milliseconds, at most chubby.MAX_ACQUIRE_WAIT_MS): TIMED_OUT when it passes.
// It returns the lock's sequencer.
//
// TIMED_OUT is definite: the request was withdrawn and the handle does
// not hold the lock. When the cell could not withdraw it (the master lost
// its quorum as the wait ended), the answer is UNAVAILABLE instead, and
// the lock may still be granted to the handle, as when ctx ends first:
// Acquire returns the context's error, and the handle's lock state is
// unknown; Acquire again, Release (LOCK_NOT_HELD is harmless) or Close
// the handle to be sure.
func (h *Handle) Acquire(ctx context.Context, mode chubby.LockMode, wait time.Duration, opts LockOptions) (*chubby.Sequencer, error) {
	return handleDo(h, "acquire", ctx, h.acquireCall(mode, wait, opts))
}

// AcquireAsync is the asynchronous form of Acquire.
func (h *Handle) AcquireAsync(ctx context.Context, mode chubby.LockMode, wait time.Duration, opts LockOptions) *rpc.Future[*chubby.Sequencer] {
	return handleGo(h, "acquire", ctx, h.acquireCall(mode, wait, opts))
}

// acquireCall is the call Acquire makes on the caller's goroutine and
// AcquireAsync on a goroutine of its own.
func (h *Handle) acquireCall(mode chubby.LockMode, wait time.Duration, opts LockOptions) func(context.Context) (*chubby.Sequencer, error) {
	return func(ctx context.Context) (*chubby.Sequencer, error) {
		if wait <= 0 {
			return nil, &OpError{Op: "acquire", Path: h.Path(),
				Err: newError(chubby.ErrorCode_INVALID_ARGUMENT, "wait must be positive, got %v", wait)}
		}
		req := &chubby.AcquireRequest{Handle: h.h, Mode: mode, WaitMs: ceilMs(wait), LockDelayMs: opts.lockDelayMs()}
		spec := h.s.spec("acquire", h.Path(), retryUnsent)
		// The master parks the call for up to wait; give Kitex more than that.
		spec.timeout = time.Duration(req.WaitMs)*time.Millisecond + h.s.c.cfg.CallTimeout
		// When the master moves elsewhere while the call is parked (the
		// old one paused or cut off), the call is sent again to the new
		// one with the same request number: the cell queues it once
		// (a resend takes the parked call's place; a lock granted to the
		// first attempt is answered with its sequencer), and it waits what
		// is left of wait.
		spec.resendOnMove = true
		spec.setRID = func(rid *chubby.RequestID) { req.Rid = rid }
		end := time.Now().Add(wait)
		first := true
		return sessionCall(ctx, h.s, spec,
			func(ctx context.Context, o ...callopt.Option) (*chubby.Sequencer, error) {
				r := *req
				if !first {
					r.WaitMs = max(ceilMs(time.Until(end)), 1)
				}
				first = false
				return h.s.c.kc.Acquire(ctx, &r, o...)
			})
	}
}

// TryAcquire takes the node's lock in mode if it is available now, and fails
// with LOCK_HELD otherwise. It returns the lock's sequencer.
func (h *Handle) TryAcquire(ctx context.Context, mode chubby.LockMode, opts LockOptions) (*chubby.Sequencer, error) {
	return handleDo(h, "try-acquire", ctx, h.tryAcquireCall(mode, opts))
}

// TryAcquireAsync is the asynchronous form of TryAcquire.
func (h *Handle) TryAcquireAsync(ctx context.Context, mode chubby.LockMode, opts LockOptions) *rpc.Future[*chubby.Sequencer] {
	return handleGo(h, "try-acquire", ctx, h.tryAcquireCall(mode, opts))
}

// tryAcquireCall is the call TryAcquire makes on the caller's goroutine and
// TryAcquireAsync on a goroutine of its own.
func (h *Handle) tryAcquireCall(mode chubby.LockMode, opts LockOptions) func(context.Context) (*chubby.Sequencer, error) {
	return func(ctx context.Context) (*chubby.Sequencer, error) {
		req := &chubby.TryAcquireRequest{Handle: h.h, Mode: mode, LockDelayMs: opts.lockDelayMs()}
		return sessionCall(ctx, h.s, h.s.onceSpec("try-acquire", h.Path(), func(r *chubby.RequestID) { req.Rid = r }),
			func(ctx context.Context, o ...callopt.Option) (*chubby.Sequencer, error) {
				return h.s.c.kc.TryAcquire(ctx, req, o...)
			})
	}
}

// Release releases the lock the handle holds (LOCK_NOT_HELD if none).
func (h *Handle) Release(ctx context.Context) error {
	_, err := handleDo(h, "release", ctx, h.releaseCall())
	return err
}

// ReleaseAsync is the asynchronous form of Release.
func (h *Handle) ReleaseAsync(ctx context.Context) *rpc.Future[struct{}] {
	return handleGo(h, "release", ctx, h.releaseCall())
}

// releaseCall is the call Release makes on the caller's goroutine and
// ReleaseAsync on a goroutine of its own.
func (h *Handle) releaseCall() func(context.Context) (struct{}, error) {
	return func(ctx context.Context) (struct{}, error) {
		req := h.req()
		return sessionCall(ctx, h.s, h.s.onceSpec("release", h.Path(), func(r *chubby.RequestID) { req.Rid = r }),
			func(ctx context.Context, o ...callopt.Option) (struct{}, error) {
				return struct{}{}, h.s.c.kc.Release(ctx, req, o...)
			})
	}
}

// GetSequencer returns the sequencer of the lock the handle holds
// (LOCK_NOT_HELD if none).
func (h *Handle) GetSequencer(ctx context.Context) (*chubby.Sequencer, error) {
	return handleDo(h, "get-sequencer", ctx, h.getSequencerCall())
}

// GetSequencerAsync is the asynchronous form of GetSequencer.
func (h *Handle) GetSequencerAsync(ctx context.Context) *rpc.Future[*chubby.Sequencer] {
	return handleGo(h, "get-sequencer", ctx, h.getSequencerCall())
}

// getSequencerCall is the call GetSequencer makes on the caller's goroutine and
// GetSequencerAsync on a goroutine of its own.
func (h *Handle) getSequencerCall() func(context.Context) (*chubby.Sequencer, error) {
	return func(ctx context.Context) (*chubby.Sequencer, error) {
		return sessionCall(ctx, h.s, h.s.spec("get-sequencer", h.Path(), retrySafe),
			func(ctx context.Context, o ...callopt.Option) (*chubby.Sequencer, error) {
				return h.s.c.kc.GetSequencer(ctx, h.req(), o...)
			})
	}
}

// Close closes the handle; a lock it holds is released, a pending Acquire
// on it fails, and its event channel is closed.
func (h *Handle) Close(ctx context.Context) error {
	_, err := await(ctx, h.CloseAsync(ctx))
	return err
}

// CloseAsync is the asynchronous form of Close.
func (h *Handle) CloseAsync(ctx context.Context) *rpc.Future[struct{}] {
	return rpc.Go(ctx, func(ctx context.Context) (struct{}, error) {
		req := &chubby.CloseRequest{Handle: h.h}
		v, err := sessionCall(ctx, h.s, h.s.onceSpec("close", h.Path(), func(r *chubby.RequestID) { req.Rid = r }),
			func(ctx context.Context, o ...callopt.Option) (struct{}, error) {
				return struct{}{}, h.s.c.kc.Close(ctx, req, o...)
			})
		if err == nil || IsCode(err, chubby.ErrorCode_HANDLE_INVALID) {
			h.s.unwatch(h) // closed now, or the cell had no such handle
		}
		return v, err
	})
}

// Poison fails every outstanding call on the handle, and every later one
// except Close, with ErrPoisoned, without closing the handle (Chubby's
// Poison): a program can stop threads blocked on a handle, such as one in
// Acquire, without freeing the handle under them. It is local: the cell is
// not told, so a call it had already received may still take effect (an
// Acquire may yet be granted; Release or Close the handle to be sure).
func (h *Handle) Poison() {
	_, cancel := h.poisonCtx()
	cancel(ErrPoisoned)
}

func (h *Handle) poisonCtx() (context.Context, context.CancelCauseFunc) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.poison == nil {
		h.poison, h.poisonCancel = context.WithCancelCause(context.Background())
	}
	return h.poison, h.poisonCancel
}

// handleGo runs a call on h asynchronously (rpc.Go) and makes Poison fail
// it: the call's context is cancelled with ErrPoisoned.
func handleGo[T any](h *Handle, op string, ctx context.Context, f func(context.Context) (T, error)) *rpc.Future[T] {
	return rpc.Go(ctx, func(ctx context.Context) (T, error) { return handleDo(h, op, ctx, f) })
}

// handleDo runs f, a call on h, on the caller's goroutine: it fails at once
// on a poisoned handle, and a Poison while it runs cancels it.
func handleDo[T any](h *Handle, op string, ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	var zero T
	pctx, _ := h.poisonCtx()
	if pctx.Err() != nil {
		return zero, &OpError{Op: op, Path: h.Path(), Err: ErrPoisoned}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(pctx, func() { cancel(ErrPoisoned) })
	defer stop()
	v, err := f(ctx)
	if err != nil && errors.Is(context.Cause(ctx), ErrPoisoned) {
		return zero, &OpError{Op: op, Path: h.Path(), Err: ErrPoisoned}
	}
	return v, err
}

func boolPtr(b bool) *bool    { return &b }
func int64Ptr(n int64) *int64 { return &n }

// ceilMs rounds d up to whole milliseconds (d > 0).
func ceilMs(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++
	}
	return ms
}
