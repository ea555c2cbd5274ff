package sim

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/chubbygo/chubby/cell/master"
	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
	rp "github.com/chubbygo/chubby/replica"
	"github.com/chubbygo/chubby/replica/vr"
)

var quietLogger = slog.New(slog.DiscardHandler)

// leaseHold is how long a master waits for a lapsed master lease to come
// back before it refuses a KeepAlive (the cell waits 500 ms; the simulated
// leases are shorter); leasePoll is how often it looks meanwhile.
const (
	leaseHold = 100 * time.Millisecond
	leasePoll = 5 * ms
)

// masterSim is what the cell's handlers do on a replica, in simulated
// form: the failover duties, CreateSession, KeepAlive, commands and reads,
// lease expiry and lock-delay Ticks, all through the master's real tables
// (cell/master: Leases, Pipeline, Cache, Waiters, Oracle). The rules of a
// call are the cell's own too: master.KeepAliveCall, AcquireCall
// (acquire.go), TimestampsCall (oracle.go), NameMaster (GetMaster) and
// Leases.Expired, carried out here on simulated timers and proposals.
type masterSim struct {
	r      *replica
	leases *master.Leases
	pipe   *master.Pipeline // the change pipeline, with the cache and write tables
	cache  *master.Cache    // pipe's
	oracle *master.Oracle   // the timestamp oracle (oracle.go)

	waiters     *master.Waiters // parked blocking Acquires (acquire.go)
	acqHeld     []*request      // Acquires held until the stale waits are withdrawn
	withdrawing bool            // withdrawing the waits earlier masters left

	view     uint64
	epoch    int64
	becoming bool // primary of view, failover duties not done yet
	serving  bool
	gen      int // bumped when mastership changes: stale timers check it

	calls  map[uint64]*call // changes in the pipeline, by id
	seq    uint64           // the last change id given
	open   []*request       // requests being handled: a crash resets them
	pipeAt int64            // the pipeline's Tick is scheduled then (local clock), 0: none
	expAt  int64            // the expiry timer is set for then (local), 0: none
	tickAt int64            // lock-delay Tick scheduled for then (wall ms), 0: none
	tsWait []*tsCall        // timestamps calls waiting for the window to change
}

// simKA is a KeepAlive being handled: the cell's master.KeepAliveCall,
// carried out on the simulated replica.
type simKA struct {
	q      *request
	c      *master.Call
	k      *master.KeepAliveCall
	grants []*chubby.LeaseGrant
}

// call is a command in the change pipeline and who hears its outcome.
type call struct {
	cmd  *fsm.Command // as proposed: its time_ms is the least it may be stamped with
	done func(*fsm.Result_, error)
}

func newMasterSim(r *replica) *masterSim {
	l := r.w.lease
	m := &masterSim{r: r,
		leases: master.NewLeases(master.LeaseConfig{Lease: l, Margin: l / 4, MaxDrift: vr.MaxClockDrift, MaxParked: 1000}),
		oracle: master.NewOracle(r.w.tsWindow),
		calls:  map[uint64]*call{},
		// The cell's default bound is far above what the simulated
		// clients can park.
		waiters: master.NewWaiters(1000),
	}
	reach := func(cmd *fsm.Command) fs.Reach { return r.sm.st.Reach(cmd) }
	// The simulated log has no commit timeout: a lease stands for it.
	m.pipe = master.NewPipeline(master.PipelineFor(l, l), master.NewWrites(), master.NewCache(0, 0), reach, m.leases.LeaseEnd)
	m.cache = m.pipe.Cache()
	return m
}

func (m *masterSim) now() int64 { return m.r.local() }

func (m *masterSim) until() int64 {
	u, ok := m.r.d.Node().ReadsAllowedUntil()
	if !ok {
		return 0
	}
	return u
}

// later runs fn as an input of its own, after the driver call in progress
// (driver callbacks must not call back into the driver).
func (m *masterSim) later(fn func()) {
	r := m.r
	ep := r.epoch
	r.w.after(0, func() {
		if r.epoch == ep {
			r.do(fn, true)
		}
	})
}

// roleChanged is the driver's OnRole.
func (m *masterSim) roleChanged(view uint64, primary bool) {
	m.gen++
	m.view = view
	if primary {
		m.becoming = true
		m.later(m.poll)
		return
	}
	m.lose()
}

// lose stops serving: parked KeepAlives and waiting changes are refused,
// the tables close (the next master owns leases).
func (m *masterSim) lose() {
	wasServing := m.serving || m.becoming
	m.serving, m.becoming = false, false
	for _, tok := range m.leases.Stop() {
		ka := tok.(*simKA)
		m.kaStep(ka, ka.k.Gone(notMaster))
	}
	m.pipeDo(func(master.Clock) { m.pipe.Stop(notMaster) })
	m.failParked()
	m.stopOracle()
	m.expAt, m.tickAt = 0, 0
	if wasServing {
		m.r.w.tracef("r%d stops serving as master (view %d)", m.r.id, m.view)
	}
}

var (
	errNotMaster = errors.New("not the master")
	// notMaster is how the pipeline refuses the changes waiting when
	// mastership is lost (as the cell's NOT_MASTER).
	notMaster = fs.Errorf(chubby.ErrorCode_NOT_MASTER, "not the master")
)

// crashed resets every connection the process had (kill: the clients see
// their calls fail at once).
func (m *masterSim) crashed() {
	m.gen++ // every timer of this incarnation dies
	m.serving, m.becoming = false, false
	if len(m.open) > 0 {
		m.r.w.tracef("r%d resets %d connections", m.r.id, len(m.open))
	}
	open := m.open
	m.open = nil
	for _, q := range open {
		m.send(q, reply{kind: replyReset})
	}
}

// poll completes the failover once the log can serve reads.
func (m *masterSim) poll() {
	if m.r.up && m.becoming && m.r.d.Node().CanServeReads(m.now()) {
		m.become()
	}
}

// become completes the failover, as the cell's becomeMaster: stamps
// anchored at the state's clock, epoch master.Epoch(view), every session
// in the state gets the recovered lease, every caching session must flush.
func (m *masterSim) become() {
	st := m.r.sm.st
	m.becoming = false
	// Its stamps start from the state's clock (master.Writes.Anchor).
	m.pipe.Writes().Anchor(st.Now(), m.r.sm.clockAt)
	m.epoch = master.Epoch(m.view)
	m.leases.Start(m.now(), m.epoch, st.Sessions())
	m.pipeDo(func(c master.Clock) { m.pipe.Reset(c, m.epoch, st.CachingSessions()) })
	m.serving = true
	m.resetOracle(st.TimestampsReserved())
	m.r.w.tracef("r%d master: view %d epoch %d sessions %d", m.r.id, m.view, m.epoch, len(st.Sessions()))
	m.armExpiry()
	m.armTick()
	m.withdrawStale()
}

// applied takes a command's effects (from the driver's apply).
func (m *masterSim) applied(fx fs.Effects) {
	m.wakeParked(fx)
	if !m.serving {
		return
	}
	if len(fx.EndedSessions) > 0 {
		m.pipeDo(func(c master.Clock) {
			for _, id := range fx.EndedSessions {
				m.pipe.Forget(c, id)
			}
		})
		m.answerLater(m.leases.Ended(fx.EndedSessions))
	}
	if len(fx.Notified) > 0 {
		m.answerLater(m.leases.Wake(fx.Notified))
	}
	m.armTick()
}

func (m *masterSim) answerLater(toks []any) {
	for _, tok := range toks {
		ka := tok.(*simKA)
		m.later(func() { m.kaStep(ka, ka.k.ParkOver()) })
	}
}

// armTick schedules a Tick at the next lock-delay end.
func (m *masterSim) armTick() {
	at, ok := m.r.sm.st.NextTimer()
	if !ok || (m.tickAt != 0 && m.tickAt <= at) {
		return
	}
	m.tickAt = at
	r, gen := m.r, m.gen
	// Counted on the commands' clock, as the cell's scheduleTick: a Tick
	// stamped before at would end nothing.
	stamp := m.pipe.Writes().Stamp(r.wallMs(), r.local())
	r.w.after(r.realAfter((at-stamp)*ms+ms), func() {
		if m.gen != gen || m.tickAt != at || !r.up {
			return
		}
		r.do(func() {
			m.tickAt = 0
			m.propose(&fsm.Command{TimeMs: at, Op: &fsm.Op{Tick: &fsm.Tick{}}}, func(_ *fsm.Result_, err error) {
				if err != nil {
					// As the cell does: try again a little later.
					r.w.after(r.w.between(10*ms, 100*ms), func() {
						if m.gen == gen && r.up {
							r.do(m.armTick, false)
						}
					})
				}
			})
		}, false)
	})
}

// armExpiry sets the expiry timer to the next lease end.
func (m *masterSim) armExpiry() {
	next, ok := m.leases.NextDue()
	if !ok || (m.expAt != 0 && m.expAt <= next) {
		return
	}
	m.expAt = next
	r, gen := m.r, m.gen
	r.w.after(r.realAfter(next-m.now()), func() {
		if m.gen != gen || m.expAt != next || !r.up {
			return
		}
		r.do(func() {
			m.expAt = 0
			now := m.now()
			due, wake := m.leases.Due(now, max(now-next, 0))
			m.answerLater(wake)
			for _, id := range due {
				m.expire(id)
			}
			m.armExpiry()
		}, false)
	})
}

// expire ends a session whose lease ran out (lock-delay applies).
func (m *masterSim) expire(id chubby.SessionID) {
	m.r.w.tracef("r%d session %d lease expired", m.r.id, id)
	gen := m.gen
	m.propose(&fsm.Command{Op: &fsm.Op{EndSession: &fsm.EndSession{Session: id, Expired: true}}}, func(res *fsm.Result_, err error) {
		if m.gen != gen {
			return
		}
		if err == nil && res.Err != nil {
			err = res.Err
		}
		// Not committed (overloaded, or not the master any more): due
		// again after a pause, as in the cell.
		ended, toks, _ := m.leases.Expired(id, m.now(), err)
		if ended {
			m.answerLater(toks)
			return
		}
		m.armExpiry()
	})
}

// clock is the time the pipeline is given.
func (m *masterSim) clock() master.Clock {
	return master.Clock{Now: m.r.local(), WallMs: m.r.wallMs(), Mono: m.r.local()}
}

// propose puts cmd through the change pipeline, as the cell's submit does:
// it is stamped no earlier than its time_ms, and proposed once the caches
// it reaches dropped their copies; done hears the outcome.
func (m *masterSim) propose(cmd *fsm.Command, done func(*fsm.Result_, error)) {
	m.seq++
	id := m.seq
	m.calls[id] = &call{cmd: cmd, done: done}
	m.pipeDo(func(c master.Clock) { m.pipe.Submit(c, id, cmd.Op, cmd.TimeMs) })
}

// pipeDo runs f on the pipeline and carries out its Ready: woken
// sessions' KeepAlives are answered, refused changes answered, and the
// changes let go are proposed.
func (m *masterSim) pipeDo(f func(master.Clock)) {
	f(m.clock())
	rd := m.pipe.Ready()
	m.answerLater(m.leases.Wake(rd.Wake))
	for _, v := range rd.Verdicts {
		c := m.calls[v.ID]
		delete(m.calls, v.ID)
		switch {
		case v.Err == nil:
			m.proposeNow(v, c)
		case v.Err.Code == chubby.ErrorCode_SESSION_EXPIRED:
			c.done(&fsm.Result_{Err: v.Err}, nil)
		case v.Err.Code == chubby.ErrorCode_NOT_MASTER:
			c.done(nil, errNotMaster)
		default:
			c.done(nil, v.Err)
		}
	}
	m.armPipe()
}

// armPipe schedules the pipeline's Tick at its next wait's end. The timer
// outlives mastership, as the cell's does: uncertain changes are released
// whoever is master.
func (m *masterSim) armPipe() {
	next, ok := m.pipe.Next()
	if !ok || (m.pipeAt != 0 && m.pipeAt <= next) {
		return
	}
	m.pipeAt = next
	r, ep := m.r, m.r.epoch
	r.w.after(r.realAfter(next-m.now()), func() {
		if r.epoch != ep || m.pipeAt != next {
			return
		}
		r.do(func() {
			m.pipeAt = 0
			m.pipeDo(m.pipe.Tick)
		}, false)
	})
}

// proposeNow hands the command let go (stamped) to the driver, in the
// view its invalidation waited in; c.done hears the outcome, and the
// change is finished: uncertain unless the log never took it.
func (m *masterSim) proposeNow(v master.Verdict, c *call) {
	r := m.r
	if r.w.quiet {
		return // the run is ending
	}
	cmd := *c.cmd
	cmd.TimeMs = v.Cmd.TimeMs
	data := fs.EncodeCommand(&cmd)
	ep := r.epoch
	reply := simProposal(func(pr rp.ProposalResult) {
		if r.epoch == ep {
			uncertain := pr.Err != nil && !rp.NeverApplies(pr.Err)
			m.later(func() { m.pipeDo(func(k master.Clock) { m.pipe.Finished(k, v.ID, uncertain) }) })
		}
		if pr.Err != nil {
			c.done(nil, pr.Err)
			return
		}
		res, _ := pr.Value.(*fsm.Result_)
		if res == nil {
			c.done(nil, errors.New("no result"))
			return
		}
		c.done(res, nil)
	})
	m.later(func() {
		if v.InView {
			if err := r.d.CheckView(v.View); err != nil {
				reply.Answer(rp.ProposalResult{Err: err})
				return
			}
		}
		r.d.Propose([][]byte{data}, []rp.Reply{reply})
	})
}

// simProposal adapts a function to rp.Reply.
type simProposal func(rp.ProposalResult)

func (f simProposal) Answer(r rp.ProposalResult) { f(r) }

// --- requests from clients ---

type reqKind int

const (
	reqCreateSession reqKind = iota
	reqKeepAlive
	reqCommand
	reqRead
	reqTimestamps
	reqGetMaster
	reqAcquire // a blocking Acquire: cmd holds it, with waitMs and rid
)

// request is a client's call as a replica receives it.
type request struct {
	c       *client
	kind    reqKind
	opID    uint64
	attempt int
	// KeepAlive
	ka *chubby.KeepAliveRequest
	// CreateSession
	caching bool
	// a command
	cmd *fsm.Command
	// a read
	handle *chubby.Handle
	cache  bool
	// timestamps
	count int64
	// a blocking Acquire
	waitMs, rid int64
	// a master watch (GetMaster): the master the client fails to reach,
	// and how long to hold the answer while no other is known
	suspect uint64
	hold    int64
}

type replyKind int

const (
	replyOK replyKind = iota
	replyNotMaster
	replyBusy    // UNAVAILABLE: retry, perhaps elsewhere
	replyExpired // SESSION_EXPIRED
	replyStale   // STALE_EPOCH
	replyReset   // the connection broke (the replica died)
)

type reply struct {
	kind    replyKind
	opID    uint64
	attempt int
	from    uint64
	hint    uint64
	epoch   int64
	res     *fsm.Result_ // a command's result
	content []byte       // a read's
	stat    *chubby.Stat
	readErr error
	cacheOK bool
	grant   *chubby.LeaseGrant // a KeepAlive's
	session int64              // CreateSession's
	leaseMs int64
	tsFirst int64 // timestamps: tsFirst..tsFirst+tsCount-1
	tsCount int64
	members []string // GetMaster: the configuration's members
}

// onRequest is a client call arriving at the replica.
func (m *masterSim) onRequest(q *request) {
	m.open = append(m.open, q)
	if q.kind == reqGetMaster {
		m.getMaster(q)
		return
	}
	if !m.serving {
		m.refuse(q)
		return
	}
	switch q.kind {
	case reqCreateSession:
		m.createSession(q)
	case reqKeepAlive:
		m.keepAlive(q)
	case reqCommand:
		m.command(q)
	case reqRead:
		m.read(q)
	case reqTimestamps:
		m.timestamps(q)
	case reqAcquire:
		m.acquire(q)
	}
}

func (m *masterSim) send(q *request, rep reply) {
	for i, o := range m.open {
		if o == q {
			m.open = append(m.open[:i], m.open[i+1:]...)
			break
		}
	}
	rep.opID, rep.attempt, rep.from = q.opID, q.attempt, m.r.id
	if rep.epoch == 0 {
		rep.epoch = m.epoch
	}
	c := q.c
	m.r.w.net.sendClient(c.id, m.r.id, func() { c.onReply(rep) })
}

// getMasterHold is the cell's noMasterHold: how long a replica that
// knows no master holds a GetMaster for one to appear.
const getMasterHold = 200 * ms

// getMasterPoll is how often a held GetMaster looks again (the cell waits
// for the log's change instead).
const getMasterPoll = 5 * ms

// getMaster answers a locate round's GetMaster as the cell's handler
// does: the master names itself only under the master lease held now;
// another replica names the primary it believes in, with that view's
// epoch; one that knows none (a view change, a master not yet serving)
// holds the call up to getMasterHold for one to appear, then says
// UNAVAILABLE.
// A master watch (q.suspect set) is held, up to q.hold, while the
// replica knows no master other than the suspect.
func (m *masterSim) getMaster(q *request) {
	hold := getMasterHold
	if q.suspect != 0 && q.hold > 0 {
		hold = q.hold
	}
	m.answerGetMaster(q, m.r.w.now+hold)
}

func (m *masterSim) answerGetMaster(q *request, until int64) {
	n, r := m.r.d.Node(), m.r
	id, known := n.PrimaryHint()
	known = known && id != m.r.id && m.r.d.Err() == nil && !m.serving
	// The cell's rule; a master without its lease answers at once (the
	// cell first waits up to its leaseHold for the lease to come back).
	switch master.NameMaster(master.MasterView{
		Serving: m.serving, LeaseHeld: n.CanServeReads(m.now()),
		Known: known, Suspect: known && id == q.suspect, HoldOver: r.w.now >= until,
	}) {
	case master.NameSelf:
		m.send(q, reply{kind: replyOK, hint: m.r.id, epoch: m.epoch, members: m.memberAddrs()})
		return
	case master.NameOther:
		m.send(q, reply{kind: replyOK, hint: id, epoch: master.Epoch(n.View()), members: m.memberAddrs()})
		return
	case master.NameNone:
		m.send(q, reply{kind: replyBusy})
		return
	}
	ep := r.epoch
	r.w.after(getMasterPoll, func() {
		if r.epoch == ep && r.up {
			r.do(func() { m.answerGetMaster(q, until) }, true)
		}
	})
}

// memberAddrs is the configuration's members as a GetMaster answer names
// them (the cell's replicaAddrs).
func (m *masterSim) memberAddrs() []string {
	ms := m.r.d.Node().Info().Members
	out := make([]string, 0, len(ms))
	for _, mb := range ms {
		out = append(out, addrOf(mb.ID))
	}
	return out
}

// failCall answers a call a master.*Call failed: NOT_MASTER (notMaster,
// or err says so) as refuse does, anything else UNAVAILABLE.
func (m *masterSim) failCall(q *request, notMaster bool, err error) {
	if notMaster || fs.Code(err) == chubby.ErrorCode_NOT_MASTER {
		m.refuse(q)
		return
	}
	m.send(q, reply{kind: replyBusy})
}

// refuse answers NOT_MASTER with the primary believed in, or UNAVAILABLE.
func (m *masterSim) refuse(q *request) {
	if id, ok := m.r.d.Node().PrimaryHint(); ok && id != m.r.id && m.r.d.Err() == nil {
		m.send(q, reply{kind: replyNotMaster, hint: id})
		return
	}
	m.send(q, reply{kind: replyBusy})
}

func (m *masterSim) result(q *request, res *fsm.Result_, err error) {
	var nm *rp.NotMasterError
	switch {
	case err == nil:
		m.send(q, reply{kind: replyOK, res: res})
	case errors.As(err, &nm), errors.Is(err, errNotMaster):
		m.refuse(q)
	default:
		m.send(q, reply{kind: replyBusy})
	}
}

func (m *masterSim) createSession(q *request) {
	arrived := m.now()
	cmd := &fsm.Command{Op: &fsm.Op{CreateSession: &chubby.CreateSessionRequest{ClientName: q.c.name(), Cache: &q.caching}}}
	gen := m.gen
	m.propose(cmd, func(res *fsm.Result_, err error) {
		if m.gen != gen {
			m.refuse(q)
			return
		}
		if err != nil || res.Err != nil || res.Session == nil {
			m.result(q, res, err)
			return
		}
		id := *res.Session
		if q.caching {
			m.cache.Declare(id)
		}
		lease, ok := m.leases.Add(m.now(), m.until(), arrived, id)
		m.armExpiry()
		if !ok {
			m.send(q, reply{kind: replyBusy})
			return
		}
		m.send(q, reply{kind: replyOK, session: id, leaseMs: lease.Milliseconds()})
	})
}

func (m *masterSim) keepAlive(q *request) {
	in, perr := master.ParseKeepAlive(q.ka, m.epoch) // as the cell's handler takes it in
	switch {
	case perr != nil && perr.Code == chubby.ErrorCode_STALE_EPOCH:
		m.send(q, reply{kind: replyStale})
		return
	case perr != nil:
		panic(fmt.Sprintf("sim: the simulated client sent a KeepAlive the master refuses: %v", perr))
	}
	ids := in.IDs
	m.pipeDo(func(c master.Clock) { m.pipe.Ack(c, q.ka.GetEpoch(), ids, in.InvAcks) })
	ka := &simKA{q: q, k: master.NewKeepAliveCall(leaseHold)}
	c, wait, err := m.leases.Register(m.now(), ids, in.Acks, ka)
	ka.c = c
	// (The simulated sessions get no events: invalidations are the news.)
	m.kaStep(ka, ka.k.Registered(wait, err == nil && m.cache.HasPending(ids), err))
}

// kaStep carries out ka's steps until one waits for the simulated world,
// as the cell's Server.keepAlive does. A lapsed master lease is looked at
// again every leasePoll (the cell waits for the log's news instead).
func (m *masterSim) kaStep(ka *simKA, st master.KeepAliveStep) {
	gen := m.gen
	for {
		switch st.Do {
		case master.KAPark:
			m.afterLocal(int64(st.Wait), gen, func() { m.kaStep(ka, ka.k.ParkOver()) })
			return
		case master.KAAnswer:
			var err error
			ka.grants, err = m.leases.Answer(ka.c, m.now(), m.until(), m.r.wallMs())
			st = ka.k.Answered(err, m.now())
		case master.KAAwaitLease:
			m.afterLocal(min(leasePoll, max(st.Until-m.now(), 0)), gen, func() { m.kaStep(ka, ka.k.LeaseBack()) })
			return
		case master.KAReply:
			m.cache.Attach(ka.grants)
			m.armExpiry()
			m.send(ka.q, reply{kind: replyOK, grant: ka.grants[0]})
			return
		case master.KAFail:
			if st.Abandon {
				m.leases.Abandon(ka.c)
			}
			m.failCall(ka.q, st.NotMaster, st.Err)
			return
		default:
			return // KANothing
		}
	}
}

func (m *masterSim) command(q *request) {
	if s := q.cmd.GetSession(); s != 0 && !m.leases.Alive(s) {
		m.send(q, reply{kind: replyExpired})
		return
	}
	cmd := *q.cmd
	cmd.TimeMs = 0
	gen := m.gen
	m.propose(&cmd, func(res *fsm.Result_, err error) {
		if m.gen != gen && err == nil {
			err = errNotMaster
		}
		m.result(q, res, err)
	})
}

func (m *masterSim) read(q *request) {
	if !m.leases.Alive(q.handle.Session) {
		m.send(q, reply{kind: replyExpired})
		return
	}
	if !m.r.d.Node().CanServeReads(m.now()) {
		m.send(q, reply{kind: replyBusy}) // the master lease lapsed
		return
	}
	// As the cell: registered before the state is read, the read ACL
	// name the read saw after.
	ok, mark := false, master.ReadMark{}
	if q.cache {
		ok, mark = m.cache.RegisterRead(q.handle.Session, q.handle.Path)
	}
	content, stat, err := m.r.sm.st.GetContentsAndStat(q.handle)
	if ok && err == nil {
		ok = m.cache.RegisterACL(q.handle.Session, q.handle.Path, stat.GetAcl().GetReadAcl(), mark)
	}
	m.send(q, reply{kind: replyOK, content: content, stat: stat, readErr: err, cacheOK: ok && err == nil})
}
