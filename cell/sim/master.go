package sim

import (
	"errors"
	"log/slog"

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
// leases are shorter).
const leaseHold = 100 * ms

// masterSim is what the cell's handlers do on a replica, in simulated
// form: the failover duties, CreateSession, KeepAlive, commands and reads,
// lease expiry and lock-delay Ticks, all through the master's real
// session tables (cell/master: Leases, Cache).
type masterSim struct {
	r      *replica
	leases *master.Leases
	cache  *master.Cache
	writes *master.Writes
	oracle *master.Oracle // the timestamp oracle (oracle.go)

	view     uint64
	epoch    int64
	becoming bool // primary of view, failover duties not done yet
	serving  bool
	gen      int // bumped when mastership changes: stale timers check it

	changes []*change  // commands waiting for cache invalidations
	ends    []*change  // EndSessions waiting for their session's commands in flight
	open    []*request // requests being handled: a crash resets them
	pollAt  int64      // a poll is scheduled then (local clock), 0: none
	expAt   int64      // the expiry timer is set for then (local), 0: none
	tickAt  int64      // lock-delay Tick scheduled for then (wall ms), 0: none
	tsWait  []*tsCall  // timestamps calls waiting for the window to change
}

// simKA is a parked KeepAlive.
type simKA struct {
	q      *request
	c      *master.Call
	lapsed int64 // when its answer first found the master lease lapsed
	done   bool
}

// change is a command waiting until every caching session acknowledged
// its invalidation (or its lease ended), or an EndSession waiting until
// its session has no command in flight.
type change struct {
	cmd    *fsm.Command
	ch     *master.Change
	wr     *master.Write
	ending chubby.SessionID // an EndSession's session
	done   func(*fsm.Result_, error)
}

func newMasterSim(r *replica) *masterSim {
	l := r.w.lease
	return &masterSim{r: r,
		leases: master.NewLeases(master.LeaseConfig{Lease: l, Margin: l / 4, MaxDrift: vr.MaxClockDrift, MaxParked: 1000}),
		cache:  master.NewCache(0, 0),
		writes: master.NewWrites(),
		oracle: master.NewOracle(r.w.tsWindow),
	}
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
		ka.done = true
		m.refuse(ka.q)
	}
	for _, c := range m.changes {
		m.cache.Done(c.ch)
		m.writeDone(c)
		c.done(nil, errNotMaster)
	}
	for _, c := range m.ends {
		m.writes.Unending(c.ending)
		c.done(nil, errNotMaster)
	}
	m.changes, m.ends = nil, nil
	m.stopOracle()
	m.expAt, m.tickAt, m.pollAt = 0, 0, 0
	if wasServing {
		m.r.w.tracef("r%d stops serving as master (view %d)", m.r.id, m.view)
	}
}

var errNotMaster = errors.New("not the master")

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

// poll does what waits for time or state: the failover duties once the
// log can serve reads, changes whose invalidations are done.
func (m *masterSim) poll() {
	r := m.r
	if !r.up {
		return
	}
	now := m.now()
	if m.becoming && r.d.Node().CanServeReads(now) {
		m.become()
	}
	if !m.serving {
		return
	}
	ends := m.ends[:0]
	for _, c := range m.ends {
		if m.writes.Running(c.ending) == 0 {
			m.begin(c.cmd, c.ending, c.done)
			continue
		}
		ends = append(ends, c)
	}
	clear(m.ends[len(ends):])
	m.ends = ends
	var next int64
	rest := m.changes[:0]
	for _, c := range m.changes {
		ready, at := m.cache.Ready(c.ch, now)
		if ready {
			m.proposeNow(c)
			continue
		}
		if next == 0 || at < next {
			next = at
		}
		rest = append(rest, c)
	}
	clear(m.changes[len(rest):])
	m.changes = rest
	if next > 0 && (m.pollAt == 0 || next < m.pollAt) {
		m.pollAt = next
		gen := m.gen
		r.w.after(r.realAfter(next-now), func() {
			if m.gen == gen && m.pollAt == next {
				m.pollAt = 0
				r.do(m.poll, false)
			}
		})
	}
}

// become completes the failover: epoch master.Epoch(view), every session in the state
// gets the recovered lease, every caching session must flush.
func (m *masterSim) become() {
	st := m.r.sm.st
	m.becoming = false
	m.epoch = master.Epoch(m.view)
	m.leases.Start(m.now(), m.epoch, st.Sessions())
	m.cache.Reset(m.epoch, st.CachingSessions())
	m.writes.Reset()
	m.serving = true
	m.resetOracle(st.TimestampsReserved())
	m.r.w.tracef("r%d master: view %d epoch %d sessions %d", m.r.id, m.view, m.epoch, len(st.Sessions()))
	m.armExpiry()
	m.armTick()
}

// applied takes a command's effects (from the driver's apply).
func (m *masterSim) applied(fx fs.Effects) {
	if !m.serving {
		return
	}
	if len(fx.EndedSessions) > 0 {
		for _, id := range fx.EndedSessions {
			m.cache.Forget(id)
		}
		m.answerLater(m.leases.Ended(fx.EndedSessions))
	}
	if len(fx.Notified) > 0 {
		m.answerLater(m.leases.Wake(fx.Notified))
	}
	m.armTick()
	if len(fx.EndedSessions) > 0 {
		m.later(m.poll) // changes waiting for those sessions may go
	}
}

func (m *masterSim) answerLater(toks []any) {
	for _, tok := range toks {
		ka := tok.(*simKA)
		m.later(func() { m.answer(ka) })
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
	r.w.after(r.realAfter((at-r.wallMs())*ms+ms), func() {
		if m.gen != gen || m.tickAt != at || !r.up {
			return
		}
		r.do(func() {
			m.tickAt = 0
			m.propose(&fsm.Command{TimeMs: max(r.wallMs(), at), Op: &fsm.Op{Tick: &fsm.Tick{}}}, func(_ *fsm.Result_, err error) {
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
		if err == nil && (res.Err == nil || res.Err.Code == chubby.ErrorCode_SESSION_EXPIRED) {
			m.answerLater(m.leases.Ended([]chubby.SessionID{id}))
			return
		}
		// Not committed (overloaded, or not the master any more): the
		// session is due again after a pause, as the cell retries.
		r := m.r
		r.w.after(r.w.between(10*ms, 50*ms), func() {
			if m.gen == gen && r.up {
				r.do(func() { m.leases.Unmark(id); m.armExpiry() }, false)
			}
		})
	})
}

// propose proposes a command once every caching session the change
// touches has dropped its copy (or its lease has ended). An EndSession
// first waits until its session has no command in flight (and refuses
// new ones), as the cell does.
func (m *masterSim) propose(cmd *fsm.Command, done func(*fsm.Result_, error)) {
	if es := cmd.Op.EndSession; es != nil {
		m.cache.Forget(es.Session) // its client no longer serves its cache
		m.writes.Ending(es.Session)
		m.ends = append(m.ends, &change{cmd: cmd, ending: es.Session, done: done})
		m.later(m.poll)
		return
	}
	m.begin(cmd, 0, done)
}

// begin stamps the command (at cmd.TimeMs or later), computes what it may
// change of what clients cache (fs.State.Reach, with the lock-delays of
// expired EndSessions in flight) and invalidates that.
func (m *masterSim) begin(cmd *fsm.Command, ending chubby.SessionID, done func(*fsm.Result_, error)) {
	session, _ := fs.OpSession(cmd.Op)
	if ending != 0 {
		session = 0
	}
	wr, delayed := m.writes.Begin(session, m.r.wallMs(), m.r.local(), cmd.TimeMs)
	if wr == nil {
		done(&fsm.Result_{Err: fs.Errorf(chubby.ErrorCode_SESSION_EXPIRED, "session %d is being ended", session)}, nil)
		return
	}
	c := *cmd
	c.TimeMs = wr.TimeMs
	reach := m.r.sm.st.Reach(&c)
	m.writes.Delays(wr, reach.Delayed)
	if !reach.All {
		reach.Paths = append(reach.Paths, delayed...)
	}
	ch := &change{cmd: &c, wr: wr, ending: ending, done: done}
	if !reach.All && len(reach.Paths) == 0 && len(reach.Trees) == 0 {
		m.proposeNow(ch)
		return
	}
	var wake []chubby.SessionID
	ch.ch, wake = m.cache.Invalidate(reach.Paths, reach.Trees, reach.All, m.leases.LeaseEnd)
	m.answerLater(m.leases.Wake(wake))
	m.changes = append(m.changes, ch)
	m.later(m.poll)
}

// writeDone ends a change's part in the write table.
func (m *masterSim) writeDone(c *change) {
	m.writes.Done(c.wr)
	if c.ending != 0 {
		m.writes.Unending(c.ending)
	}
	m.later(m.poll) // an EndSession waiting for the change's session may go
}

// proposeNow hands the command (stamped) to the driver; done hears the
// outcome. The paths it made uncachable become cachable once it applied
// (a while later if its outcome is unknown), and so its write ends.
func (m *masterSim) proposeNow(c *change) {
	r := m.r
	if r.w.quiet {
		return // the run is ending
	}
	data := fs.EncodeCommand(c.cmd)
	gen := m.gen
	reply := simProposal(func(pr rp.ProposalResult) {
		if m.gen == gen {
			release := func() {
				if c.ch != nil {
					m.cache.Done(c.ch)
				}
				m.writeDone(c)
			}
			if pr.Err != nil {
				r.w.after(r.realAfter(2*int64(r.w.lease)), func() {
					if m.gen == gen {
						release()
					}
				})
			} else {
				release()
			}
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
	m.later(func() { r.d.Propose([][]byte{data}, []rp.Reply{reply}) })
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
)

// request is a client's call as a replica receives it.
type request struct {
	c       *client
	kind    reqKind
	opID    uint64
	attempt int
	// KeepAlive
	session int64
	ackInv  int64
	epoch   int64
	// CreateSession
	caching bool
	// a command
	cmd *fsm.Command
	// a read
	handle *chubby.Handle
	cache  bool
	// timestamps
	count int64
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
}

// onRequest is a client call arriving at the replica.
func (m *masterSim) onRequest(q *request) {
	m.open = append(m.open, q)
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
	if q.epoch > 0 && q.epoch < m.epoch {
		m.send(q, reply{kind: replyStale})
		return
	}
	ids := []chubby.SessionID{q.session}
	if m.cache.Ack(q.epoch, ids, []int64{q.ackInv}) {
		m.later(m.poll)
	}
	ka := &simKA{q: q}
	c, wait, err := m.leases.Register(m.now(), ids, []int64{0}, ka)
	if err != nil {
		m.send(q, reply{kind: replyBusy})
		return
	}
	ka.c = c
	if m.cache.HasPending(ids) {
		wait = 0
	}
	r, gen := m.r, m.gen
	r.w.after(r.realAfter(int64(wait)), func() {
		if m.gen == gen && r.up {
			r.do(func() { m.answer(ka) }, false)
		}
	})
}

// answer answers a parked KeepAlive whose time has come (or that was
// woken): under the master lease held now, or, after leaseHold of a
// lapsed lease, not at all.
func (m *masterSim) answer(ka *simKA) {
	if ka.done || !m.r.up {
		return
	}
	if !m.serving {
		ka.done = true
		m.refuse(ka.q)
		return
	}
	now := m.now()
	grants, err := m.leases.Answer(ka.c, now, m.until(), m.r.wallMs())
	if errors.Is(err, master.ErrLeaseLapsed) {
		if ka.lapsed == 0 {
			ka.lapsed = now
		}
		if now-ka.lapsed >= leaseHold {
			ka.done = true
			m.leases.Abandon(ka.c)
			m.send(ka.q, reply{kind: replyBusy})
			return
		}
		r, gen := m.r, m.gen
		r.w.after(r.realAfter(5*ms), func() {
			if m.gen == gen && r.up {
				r.do(func() { m.answer(ka) }, false)
			}
		})
		return
	}
	ka.done = true
	if err != nil {
		m.refuse(ka.q)
		return
	}
	m.cache.Attach(grants)
	m.armExpiry()
	m.send(ka.q, reply{kind: replyOK, grant: grants[0]})
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
	ok := q.cache && m.cache.Register(q.handle.Session, q.handle.Path)
	content, stat, err := m.r.sm.st.GetContentsAndStat(q.handle)
	m.send(q, reply{kind: replyOK, content: content, stat: stat, readErr: err, cacheOK: ok && err == nil})
}
