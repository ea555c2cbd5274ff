package cell

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/chubbygo/chubby/cell/master"
	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
	"github.com/chubbygo/chubby/replica"
	"github.com/chubbygo/chubby/replica/vr"
)

// Failover, as the master sees it. The log tells the cell when
// this replica becomes or stops being the normal primary (roleChanged, from
// the log's loop). Becoming master of view v means, in order:
//
//  1. wait until the log can serve reads: a majority acknowledged this
//     primary's lease and every entry its view started with is applied, so
//     the state holds everything any earlier master acknowledged. It waits
//     as long as it is the primary of that view: a primary that gets no
//     lease steps down (vr), and then this ends;
//  2. start the command stamps from the state's clock
//     (master.Writes.Anchor) and take epoch master.Epoch(v) = v+1 (views
//     only grow and are on disk, so epochs never go back, across
//     failovers and restarts alike);
//  3. give every session in the state the recovered lease from now —
//     longer than any earlier master can have promised, clock drift
//     included (package master, the lease rule) — so that clients ride
//     through the failover: their KeepAlives reach the new master long
//     before that; a session that does not come back expires at its lease
//     end, and its locks (lock-delay applies) and ephemeral nodes go with
//     it;
//  4. start the cache table afresh (every recovered caching session
//     flushes before a change commits) and the oracle above every
//     committed reservation;
//  5. start serving; then re-arm the lock-delay timer and withdraw the
//     Acquire requests left waiting by the old master (nobody is parked on
//     them here): new Acquires wait until that is done
//     (awaitStaleWithdrawn). Last, a cell without ACLs gets its first
//     administrator (initACL), in the background.
//
// Losing mastership stops serving at once: parked KeepAlives and Acquires
// are answered NOT_MASTER with the new master's address when known, the
// lease timers and the lock-delay timer stop (the new master owns leases
// now), and the oracle hands out nothing more.

func (s *Server) roleChanged(view uint64, primary bool) {
	s.roleMu.Lock()
	s.roleGen++
	gen := s.roleGen
	s.serving.Store(false)
	s.roleMu.Unlock()
	if primary {
		s.goBackground(func() { s.becomeMaster(view, gen) })
		return
	}
	s.loseMaster()
}

// goBackground runs f on its own goroutine unless the server is stopping;
// shutdown waits for every such goroutine.
func (s *Server) goBackground(f func()) {
	s.roleMu.Lock()
	defer s.roleMu.Unlock()
	if s.stopping {
		return
	}
	s.backgroundW.Add(1)
	go func() {
		defer s.backgroundW.Done()
		f()
	}()
}

// current reports whether gen is still the latest role change.
func (s *Server) current(gen uint64) bool {
	s.roleMu.Lock()
	defer s.roleMu.Unlock()
	return s.roleGen == gen
}

func (s *Server) becomeMaster(view uint64, gen uint64) {
	select {
	case <-s.logReady:
	case <-s.closed:
		return
	}
	start := time.Now()
	for !s.log.CanServeReads() {
		if !s.current(gen) {
			return // the log moved on: this view is over for us
		}
		select {
		case <-s.closed:
			return
		case <-s.log.LeaseRenewed():
		case <-s.log.Changed():
		case <-time.After(5 * time.Millisecond):
		}
	}
	epoch := master.Epoch(view)
	var sessions, caching []chubby.SessionID
	var timer, tsReserved int64
	var hasTimer bool
	s.m.read(func(st *fs.State) {
		sessions = st.Sessions()
		caching = st.CachingSessions()
		timer, hasTimer = st.NextTimer()
		tsReserved = st.TimestampsReserved()
	})
	// Its stamps start from the state's clock and run no faster than its
	// own monotonic clock (master.Writes.Anchor), whatever its wall clock
	// says.
	s.changes.anchor()
	s.roleMu.Lock()
	if s.roleGen != gen {
		s.roleMu.Unlock()
		return
	}
	s.epoch.Store(epoch)
	s.leases.start(epoch, sessions)
	// The new master knows no cachers: every recovered caching session
	// flushes its cache (invalidate_all on its first KeepAlive) before a
	// change commits.
	s.changes.reset(epoch, caching)
	// The oracle starts above every reservation committed so far.
	s.oracle.reset(tsReserved)
	withdrawn := make(chan struct{})
	s.staleWithdrawn.Store(&withdrawn)
	s.serving.Store(true)
	s.roleMu.Unlock()
	if hasTimer {
		s.scheduleTick(timer)
	}
	s.cancelStaleWaits()
	close(withdrawn)
	s.cfg.Logger.Info("master", "view", view, "epoch", epoch, "sessions", len(sessions),
		"took", time.Since(start).Round(time.Microsecond))
	s.initACL(gen)
}

// initACL gives a cell without ACLs its first administrator, Config.Admin,
// through InitACL, which changes nothing once the cell has ACLs (so every
// new master may propose it; only the first one's applies). A cell locked
// out before fs refused such a change — "/" or /acl without a principal
// holding change_acl (fs.State.LockOut) — gets InitACL with recover, which
// gives Config.Admin change_acl on "/" and /acl back through the log, so
// every replica applies the same. It runs in the background and retries
// while this replica stays master.
func (s *Server) initACL(gen uint64) {
	if s.cfg.Admin == "" {
		return
	}
	initialised, lockOut := s.aclState()
	if initialised && lockOut == "" {
		return
	}
	recover := lockOut != ""
	if recover {
		s.cfg.Logger.Warn("the cell is locked out; --admin gives it back", "admin", s.cfg.Admin, "why", lockOut)
	}
	s.goBackground(func() {
		for attempt := 0; attempt < 20 && s.current(gen); attempt++ {
			_, err := s.submit(context.Background(), proposal{op: &fsm.Op{InitAcl: &fsm.InitACL{Admin: s.cfg.Admin, Recover: &recover}}})
			if err == nil {
				switch now, lo := s.aclState(); {
				case lockOut != "" && lo == "":
					s.cfg.Logger.Warn("ACLs recovered: / and /acl take change_acl from /acl/admin, which lists the admin", "admin", s.cfg.Admin)
				case lo != "":
					s.cfg.Logger.Error("--admin could not recover the cell", "admin", s.cfg.Admin, "why", lo)
				case now:
					s.cfg.Logger.Info("ACLs initialised: / and /acl are protected by /acl/admin", "admin", s.cfg.Admin)
				default:
					s.cfg.Logger.Warn("--admin changed nothing: /acl already exists though / has no ACL names; name them with chubbyfs acl set /", "admin", s.cfg.Admin)
				}
				return
			}
			s.cfg.Logger.Warn("initialising ACLs", "err", err, "attempt", attempt+1)
			select {
			case <-s.closed:
				return
			case <-time.After(100 * time.Millisecond << min(attempt, 4)):
			}
		}
	})
}

// aclsInitialised reports whether the root has ACL names.
func (s *Server) aclsInitialised() bool {
	initialised, _ := s.aclState()
	return initialised
}

// aclState reports whether the root has ACL names (InitACL, or an
// administrator's SetACL, gave it some) and why "/" or /acl has no
// principal holding change_acl ("" when they have one).
func (s *Server) aclState() (initialised bool, lockOut string) {
	var names *chubby.ACLNames
	s.m.read(func(st *fs.State) {
		names, _ = st.ACLNamesOf("/")
		lockOut = st.LockOut()
	})
	return names != nil && (names.ReadAcl != "" || names.WriteAcl != "" || names.ChangeAcl != ""), lockOut
}

func (s *Server) loseMaster() {
	select {
	case <-s.logReady:
	default:
		return // New has not finished: this replica has not served as master
	}
	nm := s.notMasterError(s.log.NotMaster())
	s.leases.stop(nm)
	s.changes.stop(nm)
	s.oracle.stop()
	s.m.failParked(nm)
	s.tickMu.Lock()
	if s.tickTimer != nil {
		s.tickTimer.Stop()
	}
	s.tickAt = 0
	s.tickMu.Unlock()
}

// notMasterError is the NOT_MASTER answer: the master's client address and
// epoch when this replica knows them.
func (s *Server) notMasterError(nm *replica.NotMasterError) *chubby.ChubbyError {
	e := fs.Errorf(chubby.ErrorCode_NOT_MASTER, "replica %d is not the master", s.cfg.ID)
	if nm == nil {
		// The log says primary but the failover duties are not done yet.
		e.Message = fmt.Sprintf("replica %d is becoming the master; retry shortly", s.cfg.ID)
		return e
	}
	if nm.Known {
		client := nm.Addr
		e.MasterAddress = &client
		ep := master.Epoch(nm.View)
		e.Epoch = &ep
		e.Message = fmt.Sprintf("replica %d is not the master; replica %d at %s is", s.cfg.ID, nm.Primary, client)
	}
	return e
}

// noMasterHold bounds how long a replica holds a call it must refuse
// while no master is known (a view change is under way, or this replica is
// finishing its failover duties): long enough for most view changes to
// end, so that the refusal names the new master (or the call is served)
// instead of the client polling with back-off; short enough that a client
// of a cell that stays without a master still hears often.
const noMasterHold = 200 * time.Millisecond

// awaitMaster waits, at most hold, until this replica serves as master or
// knows which replica does — one other than suspect (a client address a
// caller could not reach, or a master watch's current master: while this
// replica still believes in it, naming it again would only send the
// caller back to it).
func (s *Server) awaitMaster(ctx context.Context, suspect string, hold time.Duration) {
	if s.serving.Load() {
		return
	}
	t := time.NewTimer(hold)
	defer t.Stop()
	poll := 2 * time.Millisecond
	for !s.serving.Load() {
		changed := s.log.Changed()
		nm := s.log.NotMaster()
		if nm != nil && nm.Known {
			if suspect == "" || nm.Addr != suspect {
				return
			}
		}
		var soon <-chan time.Time
		if nm == nil {
			// The log made this replica primary; its failover duties take
			// milliseconds and end with serving set: look again shortly
			// (less often as it takes longer: a watch holds for seconds).
			soon = time.After(poll)
			poll = min(2*poll, 50*time.Millisecond)
		}
		select {
		case <-changed:
		case <-soon:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// serveCheckWait is serveCheck after awaitMaster: a call that arrives
// during a view change gets its answer (or its redirect) when the view
// change ends.
func (s *Server) serveCheckWait(ctx context.Context) error {
	s.awaitMaster(ctx, "", noMasterHold)
	return s.serveCheck()
}

// serveCheck refuses a client call unless this replica is serving as master.
func (s *Server) serveCheck() error {
	if s.serving.Load() {
		return nil
	}
	return s.notMasterError(s.log.NotMaster())
}

// cancelStaleWaits fails Acquire requests that were waiting when this
// replica became master: nobody is parked on them, and a client that
// retries needs its handle free of the old request. New Acquires wait
// until it is done (awaitStaleWithdrawn): a withdrawal wakes whatever is
// parked on its handle, and an Acquire retried at once (after a voter
// change the same replica is master again within a few hundred
// milliseconds) would be parked there, told TIMED_OUT, and its own
// request left waiting with nobody parked on it — to be granted to a
// client that was told it did not get the lock (found by
// TestNetnsReconfig).
func (s *Server) cancelStaleWaits() {
	var hs []*chubby.Handle
	s.m.read(func(st *fs.State) { hs = st.PendingWaits() })
	for _, h := range hs {
		if err := s.withdrawWait(h); err != nil {
			// Left waiting, with nobody parked on it: the handle's next
			// Acquire withdraws it (master.AcquireCall), or the next
			// master does.
			s.cfg.Logger.Warn("cancel stale wait", "handle", h.Id, "err", err)
		}
	}
	if len(hs) > 0 {
		s.cfg.Logger.Info("withdrew Acquire requests left waiting by the previous master", "count", len(hs))
	}
}

// status builds the cell status (the Cell service and the HTTP page).
func (s *Server) status() *chubby.CellStatus {
	var c fs.Counts
	s.m.read(func(st *fs.State) { c = st.Counts() })
	info := s.log.Info()
	applied := int64(s.log.Applied())
	st := &chubby.CellStatus{
		Cell:        s.cfg.Cell,
		Epoch:       s.Epoch(),
		Sessions:    int64(c.Sessions),
		Nodes:       int64(c.Nodes),
		Handles:     int64(c.Handles),
		LocksHeld:   int64(c.LocksHeld),
		CommittedOp: int64(info.Commit),
		UptimeMs:    s.cfg.Now().Sub(s.started).Milliseconds(),
		Version:     Version,
	}
	epoch, pending, target := int64(info.Epoch), int64(info.PendingConfig), int32(s.cfg.TargetSize)
	st.ConfigEpoch, st.PendingConfig, st.TargetSize = &epoch, &pending, &target
	st.Decisions = s.recentDecisions()
	sec := s.security()
	st.Security = &sec
	progress, gossip := s.progress(), s.gossipPeers()
	for _, mb := range info.Members {
		client := mb.ClientAddr
		rs := &chubby.ReplicaStatus{Id: strconv.FormatUint(mb.ID, 10), Address: client, Role: chubby.ReplicaRole_REPLICA, CommittedOp: -1}
		s.describeMember(rs, mb, gossip, progress)
		if mb.ID == s.cfg.ID {
			rs.CommittedOp = applied
			if info.Status == vr.StatusRecovering {
				rs.Role = chubby.ReplicaRole_RECOVERING
			}
		}
		if info.Status != vr.StatusViewChange && mb.ID == info.Primary {
			rs.Role = chubby.ReplicaRole_MASTER
			st.MasterId = rs.Id
			st.MasterAddress = client
			if st.Epoch == 0 {
				st.Epoch = master.Epoch(info.View)
			}
		}
		st.Replicas = append(st.Replicas, rs)
	}
	st.Replicas = append(st.Replicas, spares(info.Members, gossip)...)
	if why := s.removedReason(); why != "" {
		s.markRemoved(st, why)
	}
	return st
}

// statusView is a CellStatus as the HTTP /status page shows it: the same
// fields, with each replica's role by name (MASTER, REPLICA or
// RECOVERING, the names chubbyfs status --json gives too) rather than the
// enum's number.
type statusView struct {
	*chubby.CellStatus
	Replicas []replicaView `json:"replicas"` // shadows CellStatus.Replicas
}

type replicaView struct {
	*chubby.ReplicaStatus
	Role string `json:"role"` // shadows ReplicaStatus.Role
}

func statusJSON(st *chubby.CellStatus) statusView {
	v := statusView{CellStatus: st, Replicas: make([]replicaView, 0, len(st.Replicas))}
	for _, r := range st.Replicas {
		v.Replicas = append(v.Replicas, replicaView{ReplicaStatus: r, Role: r.Role.String()})
	}
	return v
}

// awaitStaleWithdrawn waits until this master has withdrawn the Acquires
// earlier masters left waiting (see cancelStaleWaits).
func (s *Server) awaitStaleWithdrawn(ctx context.Context) error {
	ch := s.staleWithdrawn.Load()
	if ch == nil {
		return nil
	}
	select {
	case <-*ch:
		return nil
	case <-ctx.Done():
		return fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "the new master is still withdrawing Acquires left waiting by the old one; retry")
	case <-s.closed:
		return fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "replica %d is shutting down", s.cfg.ID)
	}
}
