package cell

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/chubbygo/chubby/cell/master"
	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
	"github.com/chubbygo/chubby/rpc"
)

// handler implements the combined Kitex service. Every handler validates
// what it can at the edge (so a bad request costs no log write), then either
// reads the state under the read lock or proposes a command; the fs state
// machine validates everything again when the command applies.
type handler struct{ s *Server }

func invalid(format string, args ...any) error {
	return fs.Errorf(chubby.ErrorCode_INVALID_ARGUMENT, format, args...)
}

func missing(what string) error { return invalid("request has no %s", what) }

// live refuses calls for a session whose lease ran out (its EndSession may
// not have applied yet), that does not exist, or that belongs to another
// principal than the caller's. A call that arrives while no master is
// known, or while this replica is finishing its failover duties, is held
// as a KeepAlive is (serveCheckWait): a client that a master watch sent
// here a moment before this replica serves is served, not refused.
func (h *handler) live(ctx context.Context, id chubby.SessionID) error {
	if err := h.s.serveCheckWait(ctx); err != nil {
		return err
	}
	if !h.s.leases.alive(id) {
		return fs.Errorf(chubby.ErrorCode_SESSION_EXPIRED, "session %d has ended or never existed", id)
	}
	return h.s.checkOwner(ctx, id)
}

// liveHandle is live for the session of the handle hd, and refuses a
// handle no Open has answered yet.
func (h *handler) liveHandle(ctx context.Context, hd *chubby.Handle) error {
	if hd == nil {
		return missing("handle")
	}
	if err := h.live(ctx, hd.Session); err != nil {
		return err
	}
	// A handle no Open has answered yet is made up (fs.State.HandleOpened):
	// refused before anything is proposed for it, so that it cannot make
	// the cacher of a path wait and drop its copy (fs.State.Reach treats
	// the ids of handles opened so far exactly).
	var opened bool
	h.s.m.read(func(st *fs.State) { opened = st.HandleOpened(hd.Id) })
	if !opened {
		return fs.Errorf(chubby.ErrorCode_HANDLE_INVALID, "no open handle %d of session %d on %s (instance %d)", hd.Id, hd.Session, hd.Path, hd.Instance)
	}
	return nil
}

// handleWrite validates a request made through a handle that changes the
// cell and proposes its operation, exactly once under rid.
func (h *handler) handleWrite(ctx context.Context, hd *chubby.Handle, rid *chubby.RequestID, op *fsm.Op) (*fsm.Result_, error) {
	if err := h.liveHandle(ctx, hd); err != nil {
		return nil, err
	}
	if err := checkRID(rid); err != nil {
		return nil, err
	}
	return h.s.submit(ctx, proposal{op: op, session: hd.Session, rid: rid})
}

// handleRead validates a read through a handle: a live session and the
// master lease.
func (h *handler) handleRead(ctx context.Context, hd *chubby.Handle) error {
	if err := h.liveHandle(ctx, hd); err != nil {
		return err
	}
	return h.s.awaitLease(ctx)
}

func checkContent(b []byte) error {
	if len(b) > int(chubby.MAX_CONTENT_BYTES) {
		return fs.Errorf(chubby.ErrorCode_TOO_LARGE, "content of %d bytes is over the %d-byte limit", len(b), chubby.MAX_CONTENT_BYTES)
	}
	return nil
}

// checkRID validates a request's RequestID, if any.
func checkRID(rid *chubby.RequestID) error {
	if rid != nil && (rid.Seq <= 0 || rid.Floor < 1 || rid.Floor > rid.Seq) {
		return invalid("request id seq=%d floor=%d: want seq > 0 and 1 <= floor <= seq", rid.Seq, rid.Floor)
	}
	return nil
}

func checkPath(p string) error {
	_, err := fs.ParsePath(p)
	return err
}

func checkLockDelay(d *int64) error {
	if d != nil && (*d < 0 || *d > chubby.MAX_LOCK_DELAY_MS) {
		return invalid("lock_delay_ms %d outside [0, %d]", *d, chubby.MAX_LOCK_DELAY_MS)
	}
	return nil
}

func lockDelay(d *int64) int64 {
	if d == nil {
		return chubby.DEFAULT_LOCK_DELAY_MS
	}
	return *d
}

// ---- Session

func (h *handler) CreateSession(ctx context.Context, req *chubby.CreateSessionRequest) (*chubby.CreateSessionResponse, error) {
	if req == nil {
		return nil, missing("body")
	}
	if err := h.s.serveCheck(); err != nil {
		return nil, err
	}
	if len(req.ClientName) > int(chubby.MAX_CLIENT_NAME_BYTES) {
		return nil, invalid("client_name of %d bytes over the %d-byte limit", len(req.ClientName), chubby.MAX_CLIENT_NAME_BYTES)
	}
	who, err := h.s.caller(ctx)
	if err != nil {
		return nil, err
	}
	arrived := h.s.log.Now()
	res, err := h.s.submit(ctx, proposal{op: &fsm.Op{CreateSession: req}, principal: who})
	if err != nil {
		return nil, err
	}
	if res.Session == nil {
		return nil, fs.Errorf(chubby.ErrorCode_INTERNAL, "CreateSession applied without a session id")
	}
	id := *res.Session
	if req.GetCache() {
		h.s.changes.declare(id)
	}
	lease, ok := h.s.leases.add(id, arrived)
	if !ok {
		// The session exists (and will end after a lease), but this master
		// may not promise it a lease now; the client creates another.
		if err := h.s.awaitLease(ctx); err != nil {
			return nil, err
		}
		if lease, ok = h.s.leases.add(id, arrived); !ok {
			return nil, fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "the master lease lapsed as session %d was created; retry", id)
		}
	}
	return &chubby.CreateSessionResponse{Session: id, LeaseMs: lease.Milliseconds(), Epoch: h.s.epoch.Load()}, nil
}

func (h *handler) KeepAlive(ctx context.Context, req *chubby.KeepAliveRequest) (*chubby.KeepAliveResponse, error) {
	if req == nil {
		return nil, missing("body")
	}
	if err := h.s.serveCheckWait(ctx); err != nil {
		return nil, err
	}
	ka, perr := master.ParseKeepAlive(req, h.s.epoch.Load())
	if perr != nil {
		return nil, perr
	}
	ids, acks := ka.IDs, ka.Acks
	if err := h.s.checkOwner(ctx, ids...); err != nil {
		return nil, err
	}
	h.s.changes.ack(req.GetEpoch(), ids, ka.InvAcks)
	c, wait, err := h.s.leases.register(ids, acks)
	// Registered first, then looked: an event or invalidation queued from
	// now on wakes the call (leases.wake), and one queued before is seen
	// here.
	news := err == nil && wait > 0 && h.s.hasNews(ids, acks)
	k := master.NewKeepAliveCall(leaseHold)
	results, err := h.s.keepAlive(ctx, k, c, k.Registered(wait, news, err))
	if err != nil {
		return nil, err
	}
	h.s.attachEvents(results, acks)
	h.s.changes.attach(results)
	return &chubby.KeepAliveResponse{Results: results, Epoch: h.s.epoch.Load()}, nil
}

// Bounds of the events one KeepAlive reply carries (all sessions together);
// the rest wait for the next KeepAlive, which is then answered at once.
const (
	maxReplyEvents     = 4096
	maxReplyEventBytes = 1 << 20
)

// attachEvents adds to each live session's grant its queued events after
// the client's ack (acks[i] for results[i]), within the reply's bounds.
func (s *Server) attachEvents(results []*chubby.LeaseGrant, acks []int64) {
	count, bytes := 0, 0
	s.m.read(func(st *fs.State) {
		for i, g := range results {
			if g.Error != nil || count >= maxReplyEvents {
				continue
			}
			// EventsAfter gives at least one event when there is any, so
			// that a session with large events still makes progress.
			evs := st.EventsAfter(g.Session, acks[i], maxReplyEvents-count, max(maxReplyEventBytes-bytes, 1))
			for _, e := range evs {
				bytes += fs.EventBytes(e)
			}
			count += len(evs)
			g.Events = append(g.Events, evs...)
		}
	})
	if count > 0 {
		s.metrics.eventsSent.Add(float64(count))
	}
}

func (h *handler) CloseSession(ctx context.Context, req *chubby.CloseSessionRequest) error {
	if req == nil {
		return missing("body")
	}
	if err := h.s.serveCheck(); err != nil {
		return err
	}
	if err := h.s.checkOwner(ctx, req.Session); err != nil {
		return err
	}
	if !h.s.leases.markEnding(req.Session) {
		return fs.Errorf(chubby.ErrorCode_SESSION_EXPIRED, "session %d has ended or never existed", req.Session)
	}
	_, err := h.s.submit(ctx, proposal{op: &fsm.Op{EndSession: &fsm.EndSession{Session: req.Session, Expired: false}}})
	var ce *chubby.ChubbyError
	if err != nil && !(errors.As(err, &ce) && ce.Code == chubby.ErrorCode_SESSION_EXPIRED) {
		h.s.leases.unmarkEnding(req.Session)
		return err
	}
	h.s.leases.ended([]chubby.SessionID{req.Session})
	return err
}

// ---- FileSystem

func (h *handler) Open(ctx context.Context, req *chubby.OpenRequest) (*chubby.OpenResponse, error) {
	if req == nil {
		return nil, missing("body")
	}
	if err := h.live(ctx, req.Session); err != nil {
		return nil, err
	}
	if err := checkPath(req.Path); err != nil {
		return nil, err
	}
	if err := checkContent(req.InitialContent); err != nil {
		return nil, err
	}
	if m := req.GetEventMask(); m&^chubby.EVENT_MASK_ALL != 0 {
		return nil, invalid("event_mask %#x has bits outside EVENT_MASK_ALL (%#x)", m, chubby.EVENT_MASK_ALL)
	}
	if err := checkRID(req.Rid); err != nil {
		return nil, err
	}
	res, err := h.s.submit(ctx, proposal{op: &fsm.Op{Open: req}, session: req.Session, rid: req.Rid})
	if err != nil {
		return nil, err
	}
	if res.Handle == nil || res.Stat == nil {
		return nil, fs.Errorf(chubby.ErrorCode_INTERNAL, "Open applied without a handle")
	}
	return &chubby.OpenResponse{Handle: res.Handle, Stat: res.Stat, Created: res.GetCreated()}, nil
}

func (h *handler) Close(ctx context.Context, req *chubby.CloseRequest) error {
	if req == nil {
		return missing("body")
	}
	_, err := h.handleWrite(ctx, req.Handle, req.Rid, &fsm.Op{Close: req})
	return err
}

func (h *handler) GetContentsAndStat(ctx context.Context, req *chubby.HandleRequest) (*chubby.GetContentsAndStatResponse, error) {
	if req == nil {
		return nil, missing("body")
	}
	if err := h.handleRead(ctx, req.Handle); err != nil {
		return nil, err
	}
	var (
		b   []byte
		st  *chubby.Stat
		err error
	)
	// Registered before the state is read: a change either sees the
	// registration (and invalidates) or made the node uncachable first.
	// The read ACL name the read was checked against is registered after:
	// a change that may narrow it invalidates the copy (see
	// master.Cache.RegisterACL).
	cacheable, mark := false, master.ReadMark{}
	if req.GetCache() {
		cacheable, mark = h.s.changes.register(req.Handle.Session, req.Handle.Path)
	}
	h.s.m.read(func(s *fs.State) { b, st, err = s.GetContentsAndStat(req.Handle) })
	if err != nil {
		return nil, err
	}
	if cacheable {
		cacheable = h.s.changes.registerACL(req.Handle.Session, req.Handle.Path, st.GetAcl().GetReadAcl(), mark)
	}
	res := &chubby.GetContentsAndStatResponse{Content: b, Stat: st}
	if cacheable {
		res.Cacheable = &cacheable
	}
	return res, nil
}

func (h *handler) GetStat(ctx context.Context, req *chubby.HandleRequest) (*chubby.Stat, error) {
	if req == nil {
		return nil, missing("body")
	}
	if err := h.handleRead(ctx, req.Handle); err != nil {
		return nil, err
	}
	var (
		st  *chubby.Stat
		err error
	)
	h.s.m.read(func(s *fs.State) { st, err = s.GetStat(req.Handle) })
	return st, err
}

// readDirPageBytes bounds the entries of one ReadDir reply (their
// encoding, fs.DirPage.Bytes): half the payload limit, so that a page, the
// reply's own fields (under 64 bytes: the list header, cacheable, more,
// content_generation, the result wrapper) and the transport's framing and
// headers fit in one reply however long its names and paths are. A page
// holds at least one entry, and one entry is at most fs.MaxDirEntryBytes,
// far below this bound (TestReadDirPageWorstCase checks a worst-case page
// through a real server).
const readDirPageBytes = rpc.DefaultMaxPayloadBytes / 2

func (h *handler) ReadDir(ctx context.Context, req *chubby.ReadDirRequest) (*chubby.ReadDirResponse, error) {
	if req == nil {
		return nil, missing("body")
	}
	limit := int(req.GetLimit())
	if limit < 0 || limit > int(chubby.MAX_READDIR_ENTRIES) {
		return nil, invalid("limit %d outside [0, %d]", limit, chubby.MAX_READDIR_ENTRIES)
	}
	if limit == 0 {
		limit = int(chubby.MAX_READDIR_ENTRIES)
	}
	after := req.GetAfter()
	if after != "" {
		if err := fs.CheckName(after); err != nil {
			return nil, fs.Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "after: %v", err)
		}
	}
	if err := h.handleRead(ctx, req.Handle); err != nil {
		return nil, err
	}
	var (
		page fs.DirPage
		err  error
	)
	// Only a complete listing in one page is cacheable: pages are read at
	// different moments, and the cache holds what one reply said. A
	// directory too big for one page is not registered (its cachers would
	// cost every change of it a KeepAlive round trip for nothing).
	// The directory's read ACL name, as the page was read, is registered
	// after it (as GetContentsAndStat's).
	cacheable, mark := false, master.ReadMark{}
	if req.GetCache() && after == "" {
		var size int
		h.s.m.read(func(s *fs.State) { size = s.DirSize(req.Handle) })
		if size <= limit {
			cacheable, mark = h.s.changes.register(req.Handle.Session, req.Handle.Path)
		}
	}
	h.s.m.read(func(s *fs.State) { page, err = s.ReadDirPage(req.Handle, after, limit, readDirPageBytes) })
	if err != nil {
		return nil, err
	}
	if cacheable && !page.More {
		cacheable = h.s.changes.registerACL(req.Handle.Session, req.Handle.Path, page.ReadACL, mark)
	}
	res := &chubby.ReadDirResponse{Entries: page.Entries, ContentGeneration: &page.Generation}
	if page.More {
		res.More = &page.More
	} else if cacheable {
		res.Cacheable = &cacheable
	}
	return res, nil
}

func (h *handler) SetContents(ctx context.Context, req *chubby.SetContentsRequest) (*chubby.Stat, error) {
	if req == nil {
		return nil, missing("body")
	}
	if err := checkContent(req.Content); err != nil {
		return nil, err
	}
	res, err := h.handleWrite(ctx, req.Handle, req.Rid, &fsm.Op{SetContents: req})
	if err != nil {
		return nil, err
	}
	return res.Stat, nil
}

func (h *handler) Delete(ctx context.Context, req *chubby.DeleteRequest) error {
	if req == nil {
		return missing("body")
	}
	_, err := h.handleWrite(ctx, req.Handle, req.Rid, &fsm.Op{DeleteNode: req})
	return err
}

func (h *handler) Mkdir(ctx context.Context, req *chubby.MkdirRequest) (*chubby.Stat, error) {
	if req == nil {
		return nil, missing("body")
	}
	if err := h.live(ctx, req.Session); err != nil {
		return nil, err
	}
	if err := checkPath(req.Path); err != nil {
		return nil, err
	}
	if err := checkRID(req.Rid); err != nil {
		return nil, err
	}
	res, err := h.s.submit(ctx, proposal{op: &fsm.Op{Mkdir: req}, session: req.Session, rid: req.Rid})
	if err != nil {
		return nil, err
	}
	return res.Stat, nil
}

func (h *handler) CreateFile(ctx context.Context, req *chubby.CreateFileRequest) (*chubby.Stat, error) {
	if req == nil {
		return nil, missing("body")
	}
	if err := h.live(ctx, req.Session); err != nil {
		return nil, err
	}
	if err := checkPath(req.Path); err != nil {
		return nil, err
	}
	if err := checkContent(req.Content); err != nil {
		return nil, err
	}
	if err := checkRID(req.Rid); err != nil {
		return nil, err
	}
	res, err := h.s.submit(ctx, proposal{op: &fsm.Op{CreateFile: req}, session: req.Session, rid: req.Rid})
	if err != nil {
		return nil, err
	}
	return res.Stat, nil
}

// ---- Lock

func validMode(m chubby.LockMode) error {
	if m != chubby.LockMode_EXCLUSIVE && m != chubby.LockMode_SHARED {
		return invalid("lock mode %d is neither EXCLUSIVE nor SHARED", m)
	}
	return nil
}

// Acquire takes a blocking Acquire in and carries out its
// master.AcquireCall (acquire): the call is parked on an rpc.Deferred
// (machine.park) and a waiting Acquire proposed; a handle that holds the
// lock already gets its sequencer. The apply loop answers the parked call
// (machine.dispatch) when a later command grants the lock or fails the
// request (the handle, its node or its session ends), when a resend of the
// same request takes its place, or when this replica stops being the master
// (NOT_MASTER). When wait_ms passes or the caller goes away first, the
// request is withdrawn (CancelWait); a grant that won that race is the
// caller's.
func (h *handler) Acquire(ctx context.Context, req *chubby.AcquireRequest) (*chubby.Sequencer, error) {
	if req == nil {
		return nil, missing("body")
	}
	if err := h.liveHandle(ctx, req.Handle); err != nil {
		return nil, err
	}
	if err := validMode(req.Mode); err != nil {
		return nil, err
	}
	if req.WaitMs <= 0 || req.WaitMs > chubby.MAX_ACQUIRE_WAIT_MS {
		return nil, invalid("wait_ms %d outside [1, %d]", req.WaitMs, chubby.MAX_ACQUIRE_WAIT_MS)
	}
	if err := checkLockDelay(req.LockDelayMs); err != nil {
		return nil, err
	}
	if err := checkRID(req.Rid); err != nil {
		return nil, err
	}
	if err := h.s.awaitStaleWithdrawn(ctx); err != nil {
		return nil, err
	}
	var rid int64
	if req.Rid != nil { // GetRid returns a nil pointer, whose GetSeq panics
		rid = req.Rid.Seq
	}
	op := &fsm.Acquire{Handle: req.Handle, Mode: req.Mode, Wait: true, LockDelayMs: lockDelay(req.LockDelayMs)}
	a := master.NewAcquireCall(op, rid, msDuration(req.WaitMs), h.s.log.Now(), h.stale(req.Handle, rid))
	return h.acquire(ctx, a, rid)
}

// stale reports whether an Acquire attempt belongs to a request that is
// over: answered for certain by this master (master.Waiters.Stale), or
// finished by its client's word (fs.State.RequestFinished: below the
// session's floor), which also holds across failovers.
func (h *handler) stale(hd *chubby.Handle, rid int64) bool {
	if h.s.m.stale(hd.Id, rid) {
		return true
	}
	var finished bool
	h.s.m.read(func(st *fs.State) { finished = st.RequestFinished(hd.Session, rid) })
	return finished
}

// acquire carries out a's steps until it is answered. The call's parked
// Deferred is d, a new one for each park.
//
// A waiting Acquire is not made exactly-once through the request table (a
// proposal with a rid): its answer ("queued") would outlive the wait a
// failover withdraws. A resend is safe anyway: the table reattaches it to
// the parked call (Waiters.Park), and an attempt of a request answered for
// certain is answered from the state (Waiters.Stale).
func (h *handler) acquire(ctx context.Context, a *master.AcquireCall, rid int64) (*chubby.Sequencer, error) {
	hd, mode := a.Op().Handle, a.Op().Mode
	var d *rpc.Deferred[*chubby.Sequencer]
	for st := a.Start(); ; {
		if st.Unpark && d != nil {
			h.s.m.unpark(hd.Id, d)
		}
		switch st.Do {
		case master.DoPark:
			var reattached bool
			var err *chubby.ChubbyError
			d, reattached, err = h.s.m.park(hd.Id, rid)
			st = a.Parked(reattached, err)
		case master.DoPropose:
			st = a.Proposed(h.s.submit(ctx, proposal{op: &fsm.Op{Acquire: a.Op()}}))
		case master.DoHeld:
			if st.Lease {
				// Bounded by leaseHold: asked after the wait, when ctx may
				// be over, the state still answers.
				st = a.Held(h.held(context.WithoutCancel(ctx), hd, mode))
			} else {
				st = a.Held(h.s.heldNow(hd, mode), nil)
			}
		case master.DoWaits:
			st = a.Waits(h.waits(hd))
		case master.DoWithdraw:
			if st.Finishing {
				h.s.m.finishing(hd.Id, d)
			}
			err := h.s.withdrawOnce(hd)
			if err != nil {
				h.s.cfg.Logger.Warn("cancel wait", "handle", hd.Id, "err", rpc.CutForLog(err.Error()))
			}
			st = a.Withdrawn(err)
		case master.DoPause:
			select {
			case <-time.After(st.Pause):
			case <-h.s.closed:
			}
			st = a.Resumed()
		case master.DoWait:
			st = h.parkWait(ctx, a, d, st.Until)
		case master.DoAnswer:
			h.s.m.settle(hd.Id, rid, d, st.Record)
			if st.Err != nil {
				return nil, st.Err
			}
			return st.Seq, nil
		default:
			return nil, fs.Errorf(chubby.ErrorCode_INTERNAL, "Acquire of handle %d: step %v out of turn", hd.Id, st.Do)
		}
	}
}

// parkWait waits on the parked call's Deferred until until (on the log's
// monotonic clock, as the call's master.AcquireCall): a's next step after its answer (Woken), or after its wait
// ran out or its caller went away (WaitOver).
func (h *handler) parkWait(ctx context.Context, a *master.AcquireCall, d *rpc.Deferred[*chubby.Sequencer], until int64) master.AcquireStep {
	h.s.metrics.parkedAcquire(1)
	defer h.s.metrics.parkedAcquire(-1)
	rest := time.Duration(max(until-h.s.log.Now(), 0))
	seq, err := d.Park(ctx, max(rest, 1))
	if err == nil {
		return a.Woken(seq, nil)
	}
	var ce *chubby.ChubbyError
	if errors.As(err, &ce) {
		return a.Woken(nil, ce) // handle closed, node deleted, session ended, superseded, not the master
	}
	return a.WaitOver()
}

// waits reports whether the state has a request of handle waiting.
func (h *handler) waits(handle *chubby.Handle) bool {
	var w bool
	h.s.m.read(func(st *fs.State) { w = st.Waits(handle.Id) })
	return w
}

// withdrawOnce proposes the CancelWait of handle's waiting request
// (nothing happens when it waits no more), unless this replica is not
// the master.
func (s *Server) withdrawOnce(handle *chubby.Handle) error {
	if !s.serving.Load() {
		return s.notMasterErr()
	}
	_, err := s.submit(context.Background(), proposal{op: &fsm.Op{CancelWait: &fsm.CancelWait{Handle: handle}}})
	return err
}

// withdrawWait is withdrawOnce, proposed again after a pause while the
// cell is only briefly unavailable (master.Withdrawal).
func (s *Server) withdrawWait(handle *chubby.Handle) error {
	var w master.Withdrawal
	for {
		err := s.withdrawOnce(handle)
		pause, again := w.Failed(err)
		if !again {
			return err
		}
		select {
		case <-time.After(pause):
		case <-s.closed:
			return err
		}
	}
}

func (h *handler) TryAcquire(ctx context.Context, req *chubby.TryAcquireRequest) (*chubby.Sequencer, error) {
	if req == nil {
		return nil, missing("body")
	}
	if err := h.liveHandle(ctx, req.Handle); err != nil {
		return nil, err
	}
	if err := validMode(req.Mode); err != nil {
		return nil, err
	}
	if err := checkLockDelay(req.LockDelayMs); err != nil {
		return nil, err
	}
	if err := checkRID(req.Rid); err != nil {
		return nil, err
	}
	res, err := h.s.submit(ctx, proposal{op: &fsm.Op{Acquire: &fsm.Acquire{
		Handle: req.Handle, Mode: req.Mode, Wait: false, LockDelayMs: lockDelay(req.LockDelayMs),
	}}, session: req.Handle.Session, rid: req.Rid})
	if err != nil {
		return nil, err
	}
	if res.Sequencer == nil {
		return nil, fs.Errorf(chubby.ErrorCode_INTERNAL, "TryAcquire applied without a sequencer")
	}
	return res.Sequencer, nil
}

func (h *handler) Release(ctx context.Context, req *chubby.HandleRequest) error {
	if req == nil {
		return missing("body")
	}
	_, err := h.handleWrite(ctx, req.Handle, req.Rid, &fsm.Op{Release: req})
	return err
}

func (h *handler) GetSequencer(ctx context.Context, req *chubby.HandleRequest) (*chubby.Sequencer, error) {
	if req == nil {
		return nil, missing("body")
	}
	if err := h.handleRead(ctx, req.Handle); err != nil {
		return nil, err
	}
	var (
		seq *chubby.Sequencer
		err error
	)
	h.s.m.read(func(s *fs.State) { seq, err = s.GetSequencer(req.Handle) })
	return seq, err
}

func (h *handler) CheckSequencer(ctx context.Context, req *chubby.CheckSequencerRequest) (*chubby.CheckSequencerResponse, error) {
	if req == nil || req.Sequencer == nil {
		return nil, missing("sequencer")
	}
	if err := validMode(req.Sequencer.Mode); err != nil {
		return nil, err
	}
	if err := checkPath(req.Sequencer.Path); err != nil {
		return nil, err
	}
	who, err := h.s.caller(ctx)
	if err != nil {
		return nil, err
	}
	if err := h.s.awaitLease(ctx); err != nil {
		return nil, err
	}
	var (
		ok     bool
		reason string
	)
	h.s.m.read(func(s *fs.State) { ok, reason, err = s.CheckSequencer(who, req.Sequencer) })
	if err != nil {
		return nil, err
	}
	return &chubby.CheckSequencerResponse{Valid: ok, Reason: reason}, nil
}

// held returns the sequencer of the lock the handle holds in mode, nil if
// it holds none: read from memory, so only under the master lease (the
// error when it cannot be had: NOT_MASTER or UNAVAILABLE).
func (h *handler) held(ctx context.Context, hd *chubby.Handle, mode chubby.LockMode) (*chubby.Sequencer, error) {
	if err := h.s.awaitLease(ctx); err != nil {
		return nil, err
	}
	return h.s.heldNow(hd, mode), nil
}

// heldNow is the handle's sequencer if it holds the lock in mode in this
// replica's state now, with no master lease: what a command this replica
// applied settled (a withdrawn request is granted by no later command).
func (s *Server) heldNow(hd *chubby.Handle, mode chubby.LockMode) *chubby.Sequencer {
	var seq *chubby.Sequencer
	s.m.read(func(st *fs.State) { seq, _ = st.GetSequencer(hd) })
	if seq != nil && seq.Mode == mode {
		return seq
	}
	return nil
}

// ---- Cell

func (h *handler) GetMaster(ctx context.Context, req *chubby.GetMasterRequest) (*chubby.GetMasterResponse, error) {
	if req == nil { // the IDL lets it be absent: one without unreachable
		req = &chubby.GetMasterRequest{}
	}
	suspect := req.GetUnreachable()
	if len(suspect) > maxAddrBytes {
		return nil, invalid("unreachable of %d bytes over the %d-byte limit", len(suspect), maxAddrBytes)
	}
	if why := h.s.removedReason(); why != "" {
		return nil, h.s.removedErr(why) // it knows no master of the cell's configuration
	}
	if w := req.GetWaitMs(); w < 0 || w > chubby.MAX_GET_MASTER_WAIT_MS {
		return nil, invalid("wait_ms %d outside [0, %d]", w, chubby.MAX_GET_MASTER_WAIT_MS)
	}
	hold := noMasterHold
	if suspect != "" && req.GetWaitMs() > 0 {
		hold = msDuration(req.GetWaitMs()) // a master watch
		h.s.metrics.masterWatch(1)
		defer h.s.metrics.masterWatch(-1)
	}
	h.s.awaitMaster(ctx, suspect, hold)
	// Answered by master.NameMaster, the hold being over (awaitMaster).
	v := master.MasterView{Serving: h.s.serving.Load(), HoldOver: true}
	if v.Serving {
		v.LeaseHeld = h.s.awaitLease(ctx) == nil
		v.Serving = v.LeaseHeld || h.s.serving.Load()
	}
	nm := h.s.log.NotMaster()
	v.Known = nm != nil && nm.Known
	v.Suspect = v.Known && suspect != "" && nm.Addr == suspect
	switch master.NameMaster(v) {
	case master.NameSelf:
		return &chubby.GetMasterResponse{MasterAddress: h.s.Addr(), Epoch: h.s.epoch.Load(), MasterId: strconv.FormatUint(h.s.cfg.ID, 10),
			Replicas: h.s.replicaAddrs()}, nil
	case master.NameOther:
		return &chubby.GetMasterResponse{MasterAddress: nm.Addr, Epoch: master.Epoch(nm.View), MasterId: strconv.FormatUint(nm.Primary, 10),
			Replicas: h.s.replicaAddrs()}, nil
	}
	if v.Serving {
		return nil, fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "replica %d has been the master but holds no master lease now; ask another replica", h.s.cfg.ID)
	}
	return nil, fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "no master right now (a view change is under way); retry shortly")
}

// maxAddrBytes bounds an address a client sends (GetMaster's unreachable).
const maxAddrBytes = 512

func (h *handler) GetStatus(ctx context.Context) (*chubby.CellStatus, error) {
	return h.s.status(), nil
}

// maxReplicaIDDigits bounds RemoveMember's id: a replica id is a uint64,
// at most 20 decimal digits.
const maxReplicaIDDigits = 20

func (h *handler) RemoveMember(ctx context.Context, req *chubby.RemoveMemberRequest) (*chubby.RemoveMemberResponse, error) {
	if req == nil {
		return nil, missing("request")
	}
	if len(req.Id) > maxReplicaIDDigits {
		return nil, invalid("replica id of %d bytes", len(req.Id))
	}
	// Taking a replica out is the cell's administration: change_acl on "/".
	who, err := h.s.caller(ctx)
	if err != nil {
		return nil, err
	}
	h.s.m.read(func(st *fs.State) { err = st.Allowed(who, "/", fs.ChangeACLRight) })
	if err != nil {
		return nil, err
	}
	i, err := h.s.removeMember(ctx, req.Id)
	if err != nil {
		return nil, err
	}
	return &chubby.RemoveMemberResponse{Index: int64(i)}, nil
}

// SnapshotRead serves a backup (cell/backup.go). It reveals every file,
// so it needs what the cell's administration needs: change_acl on "/".
func (h *handler) SnapshotRead(ctx context.Context, req *chubby.SnapshotReadRequest) (*chubby.SnapshotReadResponse, error) {
	if req == nil {
		return nil, missing("request")
	}
	if req.Index < 0 || req.Chunk < 0 || req.Index == 0 && req.Chunk != 0 {
		return nil, invalid("index %d, chunk %d: want index 0 and chunk 0 to start, or a snapshot's index and a chunk >= 0", req.Index, req.Chunk)
	}
	who, err := h.s.caller(ctx)
	if err != nil {
		return nil, err
	}
	h.s.m.read(func(st *fs.State) { err = st.Allowed(who, "/", fs.ChangeACLRight) })
	if err != nil {
		return nil, err
	}
	if err := h.s.serveCheck(); err != nil {
		return nil, err
	}
	return h.s.snapshotRead(ctx, uint64(req.Index), uint32(req.Chunk))
}

// Multi validates what it can at the edge (counts, sizes, paths; fs checks
// everything again) and proposes the request as one command.
func (h *handler) Multi(ctx context.Context, req *chubby.MultiRequest) (*chubby.MultiResponse, error) {
	if req == nil {
		return nil, missing("body")
	}
	if err := checkMulti(req); err != nil {
		return nil, err
	}
	if err := h.live(ctx, req.Session); err != nil {
		return nil, err
	}
	if err := checkRID(req.Rid); err != nil {
		return nil, err
	}
	res, err := h.s.submit(ctx, proposal{op: &fsm.Op{Multi: req}, session: req.Session, rid: req.Rid})
	if err != nil {
		return nil, err
	}
	if res.Multi == nil {
		return nil, fs.Errorf(chubby.ErrorCode_INTERNAL, "Multi applied without an answer")
	}
	return res.Multi, nil
}

// checkMulti checks a MultiRequest's bounds and paths.
func checkMulti(req *chubby.MultiRequest) error {
	if n := len(req.Compares); n > int(chubby.MAX_MULTI_COMPARES) {
		return invalid("%d compares, at most %d", n, chubby.MAX_MULTI_COMPARES)
	}
	if n := len(req.Ops); n == 0 || n > int(chubby.MAX_MULTI_OPS) {
		return invalid("%d ops, want 1..%d", n, chubby.MAX_MULTI_OPS)
	}
	for i, c := range req.Compares {
		if c == nil {
			return invalid("compare %d is missing", i)
		}
		if err := checkPath(c.Path); err != nil {
			return fs.Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "compare %d: %v", i, err)
		}
	}
	bytes := 0
	for i, op := range req.Ops {
		if op == nil {
			return invalid("op %d is missing", i)
		}
		if err := checkPath(op.Path); err != nil {
			return fs.Errorf(chubby.ErrorCode_INVALID_ARGUMENT, "op %d: %v", i, err)
		}
		if err := checkContent(op.Content); err != nil {
			return err
		}
		bytes += len(op.Content)
	}
	if bytes > maxMultiContentBytes { // MAX_MULTI_BYTES, or what one log entry holds (entrylimit.go)
		return fs.Errorf(chubby.ErrorCode_TOO_LARGE, "contents of %d bytes together, over the %d-byte limit of one Multi", bytes, maxMultiContentBytes)
	}
	return nil
}

// ---- Oracle

func (h *handler) GetTimestamps(ctx context.Context, req *chubby.GetTimestampsRequest) (*chubby.GetTimestampsResponse, error) {
	if req == nil {
		return nil, missing("body")
	}
	if req.Count < 1 || req.Count > chubby.MAX_TIMESTAMPS_PER_CALL {
		return nil, invalid("count %d outside [1, %d]", req.Count, chubby.MAX_TIMESTAMPS_PER_CALL)
	}
	if err := h.s.serveCheck(); err != nil {
		return nil, err
	}
	first, err := h.s.timestamps(ctx, int64(req.Count))
	if err != nil {
		return nil, err
	}
	return &chubby.GetTimestampsResponse{First: first, Count: req.Count, Epoch: h.s.epoch.Load()}, nil
}

// ---- ACLs and identity

func (h *handler) SetACL(ctx context.Context, req *chubby.SetACLRequest) (*chubby.Stat, error) {
	if req == nil {
		return nil, missing("body")
	}
	if req.Acl == nil {
		return nil, missing("acl")
	}
	res, err := h.handleWrite(ctx, req.Handle, req.Rid, &fsm.Op{SetAcl: req})
	if err != nil {
		return nil, err
	}
	return res.Stat, nil
}

func (h *handler) WhoAmI(ctx context.Context) (*chubby.WhoAmIResponse, error) {
	p, err := h.s.caller(ctx)
	if err != nil {
		return nil, err
	}
	return &chubby.WhoAmIResponse{Principal: p, Tls: rpc.Caller(ctx).TLS}, nil
}
