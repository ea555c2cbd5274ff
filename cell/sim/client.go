package sim

import (
	"fmt"
	"time"

	"github.com/chubbygo/chubby/client/keepalive"
	"github.com/chubbygo/chubby/client/locate"
	"github.com/chubbygo/chubby/client/rid"
	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// The workload: a few files written, read (through the cache) and
// compare-and-swapped, a few exclusive locks taken and released, a few
// names raced for by CreateFile, and now and then a few timestamps from
// the oracle.
const (
	nFiles   = 2
	nLocks   = 2
	nCreates = 3
)

func filePath(i int) string   { return fmt.Sprintf("/f%d", i) }
func lockPath(i int) string   { return fmt.Sprintf("/l%d", i) }
func createPath(i int) string { return fmt.Sprintf("/c%d", i) }

type opKind int

const (
	opCreateSession opKind = iota
	opSetupCreate
	opOpen
	opRead
	opWrite
	opCAS
	opCreate
	opAcquire
	opRelease
	opTimestamps
)

var opNames = [...]string{"create-session", "setup-create", "open", "read", "write", "cas", "create", "acquire", "release", "timestamps"}

func (k opKind) String() string { return opNames[k] }

// op is one client operation, retried until it completes.
type op struct {
	id       uint64
	kind     opKind
	idx      int // file, lock or create index
	path     string
	lock     bool // open a lock node (READ) rather than a file (READ_WRITE)
	cmd      *fsm.Command
	handle   *chubby.Handle
	call     int64 // real time it began
	attempts int
	in       modelInput
	sess     *csession // the session it runs in
	cacheGen uint64    // a read: the session's cache generation when sent
	sent     int64     // create-session: the client's clock at the send
	count    int64     // timestamps: how many
	patient  bool      // timestamps: a caller with a long deadline
	// A blocking Acquire (opAcquire with wait): its request number, which
	// every resend carries, and when its wait ends (the client's clock).
	wait    bool
	rid     int64
	waitEnd int64
	sentTo  uint64 // the replica its latest attempt went to
	callEv  int    // the event it began in (orders the calls of one instant)
}

// csession is one session of a client: its KeepAlive loop and local lease
// (client/keepalive and client/lease, the library's code), handles, lock
// beliefs and cache.
type csession struct {
	id      int64
	k       *keepalive.Keeper // the library's KeepAlive loop, with the session's local lease
	rids    rid.Numbers       // the library's request numbers
	files   [nFiles]*chubby.Handle
	locks   [nLocks]*chubby.Handle
	holding [nLocks]*chubby.Sequencer // believed held, with its sequencer
	ready   bool                      // the handles are open
	over    bool

	// The cache of file contents: filled from replies marked cacheable,
	// served only while the session is safe, emptied by invalidations,
	// jeopardy and a new master. gen moves at every invalidation: a reply
	// read before one is not cached.
	cache    map[string]cachedFile
	cacheGen uint64
	invAcked int64

	kaWake int64 // when the Keeper's next Tick is scheduled (real time)
}

type cachedFile struct {
	value string
	gen   int64
}

// client is one sequential client with one session at a time. It sends
// each operation to the replica it believes is the master, follows
// NOT_MASTER hints, and retries on timeouts — with the same (session, seq)
// for commands, so a retry is applied at most once. A KeepAlive loop keeps
// its session: safe until the local lease ends, then jeopardy, then
// expired after the grace period, and then the client starts a new one.
type client struct {
	w      *world
	id     int
	rate   float64
	offset int64
	// guess is the library's master guess (client/locate): where calls
	// and KeepAlives go, and how that moves.
	guess *locate.Guess

	sess    *csession
	cur     *op
	waiting bool // cur waits for the session to be safe
	setup   []*op
	opSeq   uint64
	values  int
	lastGen [nFiles]int64

	stopping bool
	finished bool
	// oracleOnly: a client of the timestamp oracle alone (a transaction
	// coordinator): no session, one GetTimestamps after another.
	oracleOnly bool

	// The library's locate rounds and master watch (client/locator.go,
	// client/watch.go): round is the locate round in progress, rounds
	// counts them; watchSeq numbers the watches, watchFails counts those
	// failed in a row.
	round      *locRound
	rounds     uint64
	watching   bool
	watchSeq   uint64
	watchFails int
	// the watch in flight: the guess it named, when it left, the epoch known
	watchCur   string
	watchStart int64
	watchEpoch int64
}

// newClient is a client configured with every replica of the world, from
// one drawn at random: its first guess.
func newClient(w *world, id int) *client {
	n := len(w.replicas)
	first := w.intn(n)
	seeds := make([]string, n)
	for i := range n {
		seeds[i] = addrOf(uint64((first+i)%n + 1))
	}
	return &client{w: w, id: id, rate: w.drift(), offset: w.rng.Int64N(1 << 40), guess: locate.New(locate.Config{Seeds: seeds})}
}

// target is the replica the master guess names.
func (c *client) target() uint64 { return idOf(c.guess.Addr()) }

func (c *client) name() string { return fmt.Sprintf("c%d", c.id) }

// local is the client's clock (ns); localTime the same as a time.Time for
// the lease rules.
func (c *client) local() int64             { return c.offset + int64(float64(c.w.now)*c.rate) }
func (c *client) localTime() time.Time     { return time.Unix(0, c.local()) }
func (c *client) realOf(t time.Time) int64 { return int64(float64(t.UnixNano()-c.offset) / c.rate) }

// believes reports whether the client believes, at this instant, that it
// holds lock l: its session is safe by its own clock and it was told its
// Acquire succeeded and has not sent Release.
func (c *client) believes(l int) bool {
	s := c.sess
	return s != nil && !s.over && s.holding[l] != nil && s.k.Safe(c.localTime())
}

func (c *client) describe() string {
	st := "no session"
	if s := c.sess; s != nil {
		st = fmt.Sprintf("session %d %v", s.id, s.k.State(c.localTime()))
	}
	if c.cur == nil {
		return fmt.Sprintf("c%d idle, %s", c.id, st)
	}
	return fmt.Sprintf("c%d %v#%d attempts=%d target=%s since %v waiting=%v, %s", c.id, c.cur.kind, c.cur.id, c.cur.attempts, c.guess.Addr(), c.cur.call, c.waiting, st)
}

// start begins the client's first session. Client 0 creates the files and
// locks; the others wait until it has.
func (c *client) start() {
	if c.oracleOnly {
		c.think()
		return
	}
	c.newSession()
}

func (c *client) newSession() {
	c.sess = nil
	c.setup = []*op{{kind: opCreateSession}}
	c.nextSetup()
}

func (c *client) nextSetup() {
	if len(c.setup) == 0 {
		c.w.tracef("c%d setup done: session %d", c.id, c.sess.id)
		c.sess.ready = true
		c.think()
		return
	}
	o := c.setup[0]
	c.setup = c.setup[1:]
	switch o.kind {
	case opCreateSession:
	case opSetupCreate:
		o.cmd = c.command(&fsm.Op{CreateFile: &chubby.CreateFileRequest{Session: c.sess.id, Path: o.path}})
	case opOpen:
		mode := chubby.OpenMode_READ_WRITE
		if o.lock {
			mode = chubby.OpenMode_READ
		}
		o.cmd = c.command(&fsm.Op{Open: &chubby.OpenRequest{Session: c.sess.id, Path: o.path, Mode: mode, Create: chubby.CreateMode_OPEN_EXISTING}})
	}
	c.begin(o)
}

// sessionCreated starts the session's KeepAlive loop and its setup.
func (c *client) sessionCreated(o *op, rep reply) {
	w := c.w
	s := &csession{id: rep.session, cache: map[string]cachedFile{}}
	s.k = c.newKeeper(o.sent, rep.leaseMs, rep.epoch)
	c.sess = s
	w.res.Sessions++
	w.tracef("c%d session %d created, lease %dms", c.id, s.id, rep.leaseMs)
	c.heard(addrOf(rep.from), rep.epoch)
	c.startWatch()
	c.kaStep(s)
	if c.id == 0 && !w.setupOK {
		for i := range nFiles {
			c.setup = append(c.setup, &op{kind: opSetupCreate, path: filePath(i)})
		}
		for i := range nLocks {
			c.setup = append(c.setup, &op{kind: opSetupCreate, path: lockPath(i)})
		}
	}
	for i := range nFiles {
		c.setup = append(c.setup, &op{kind: opOpen, idx: i, path: filePath(i)})
	}
	for i := range nLocks {
		c.setup = append(c.setup, &op{kind: opOpen, idx: i, path: lockPath(i), lock: true})
	}
}

// command wraps an operation in a command of the session numbered as the
// library numbers its calls (client/rid), with the floor.
func (c *client) command(o *fsm.Op) *fsm.Command {
	seq, floor := c.sess.rids.Begin()
	s, q, f := c.sess.id, int64(seq), int64(floor)
	return &fsm.Command{Session: &s, Seq: &q, SeqFloor: &f, Op: o}
}

// finished records that o's request number, if it has one, is finished
// (the library's endRequest): o was answered.
func (o *op) finished() {
	switch {
	case o.sess == nil:
	case o.wait:
		o.sess.rids.End(uint64(o.rid))
	case o.cmd != nil && o.cmd.Seq != nil:
		o.sess.rids.End(uint64(*o.cmd.Seq))
	}
}

func (c *client) stopAfterCurrent() {
	c.stopping = true
	if c.mayStop() && c.cur == nil && !c.finished && (c.sess == nil || c.sess.ready) {
		c.finish()
	}
}

// mayStop reports whether the client stops once its current operation is
// over: after the faults end, except client 0 before it has made the
// files and locks, which every other client waits for (its session may
// expire during the setup: it then starts a new one and goes on).
func (c *client) mayStop() bool { return c.stopping && (c.id != 0 || c.w.setupOK) }

func (c *client) finish() {
	c.finished = true
	c.w.tracef("c%d finished", c.id)
	c.w.clientFinished()
}

func (c *client) think() {
	if c.mayStop() {
		c.finish()
		return
	}
	w := c.w
	w.after(w.between(0, 20*ms), func() {
		if c.cur == nil && !c.finished {
			if c.mayStop() {
				c.finish()
				return
			}
			c.nextOp()
		}
	})
}

func (c *client) nextOp() {
	w, s := c.w, c.sess
	o := &op{}
	if c.oracleOnly {
		*o = op{kind: opTimestamps, count: int64(1 + w.intn(5)), patient: w.chance(0.5)}
		c.begin(o)
		return
	}
	// 0..99 the mix as it was before the oracle; 100..109 timestamps.
	switch k := w.intn(110); {
	case k < 35:
		i := w.intn(nFiles)
		*o = op{kind: opRead, idx: i, handle: s.files[i]}
		o.in = modelInput{kind: opRead, key: filePath(i)}
	case k < 50:
		i := w.intn(nFiles)
		v := c.newValue()
		*o = op{kind: opWrite, idx: i}
		o.cmd = c.command(&fsm.Op{SetContents: &chubby.SetContentsRequest{Handle: s.files[i], Content: []byte(v)}})
		o.in = modelInput{kind: opWrite, key: filePath(i), value: v}
	case k < 62:
		i := w.intn(nFiles)
		v := c.newValue()
		exp := c.lastGen[i] + int64(w.intn(3)) - 1
		*o = op{kind: opCAS, idx: i}
		o.cmd = c.command(&fsm.Op{SetContents: &chubby.SetContentsRequest{Handle: s.files[i], Content: []byte(v), ExpectedGeneration: &exp}})
		o.in = modelInput{kind: opCAS, key: filePath(i), value: v, expected: exp}
	case k < 90:
		i := w.intn(nLocks)
		if s.holding[i] != nil {
			*o = op{kind: opRelease, idx: i}
			o.cmd = c.command(&fsm.Op{Release: &chubby.HandleRequest{Handle: s.locks[i]}})
			// The belief ends when the release is sent.
			s.holding[i] = nil
		} else {
			*o = op{kind: opAcquire, idx: i}
			// Lock-delay is a second line of defence; often none, so that
			// mutual exclusion rests on the lease rule alone.
			delay := int64(0)
			if w.chance(0.5) {
				delay = w.between(0, int64(w.lease)) / ms
			}
			if !w.opt.NoBlockingAcquire && w.chance(0.5) {
				// A blocking Acquire, as the library sends it: parked at the
				// master up to its wait, sent again with the same request
				// number when the master moves, waiting what is left.
				seq, _ := s.rids.Begin()
				o.wait, o.rid = true, int64(seq)
				o.waitEnd = c.local() + w.between(10*ms, 2*int64(w.lease))
				o.cmd = &fsm.Command{Op: &fsm.Op{Acquire: &fsm.Acquire{Handle: s.locks[i], Mode: chubby.LockMode_EXCLUSIVE, Wait: true, LockDelayMs: delay}}}
			} else {
				o.cmd = c.command(&fsm.Op{Acquire: &fsm.Acquire{Handle: s.locks[i], Mode: chubby.LockMode_EXCLUSIVE, Wait: false, LockDelayMs: delay}})
			}
		}
		o.in = modelInput{kind: o.kind, key: lockPath(i), client: c.id}
	case k < 100:
		i := w.intn(nCreates)
		v := c.newValue()
		*o = op{kind: opCreate, idx: i}
		o.cmd = c.command(&fsm.Op{CreateFile: &chubby.CreateFileRequest{Session: s.id, Path: createPath(i), Content: []byte(v)}})
		o.in = modelInput{kind: opCreate, key: createPath(i)}
	default:
		*o = op{kind: opTimestamps, count: int64(1 + w.intn(5)), patient: w.chance(0.5)}
	}
	c.begin(o)
}

func (c *client) newValue() string {
	c.values++
	return fmt.Sprintf("c%d.%d", c.id, c.values)
}

func (c *client) begin(o *op) {
	c.opSeq++
	o.id = uint64(c.id)<<32 | c.opSeq
	o.call = c.w.now
	o.callEv = c.w.nevent
	o.sess = c.sess
	c.cur = o
	if o.kind == opTimestamps {
		c.w.tracef("c%d begin %v#%d (%d)", c.id, o.kind, o.id, o.count)
	} else {
		c.w.tracef("c%d begin %v#%d %s", c.id, o.kind, o.id, o.in.String())
	}
	if o.kind == opRead && c.serveFromCache(o) {
		return
	}
	c.attempt()
}

// serveFromCache completes a read from the session's cache if it may: the
// session is safe and the file is cached.
func (c *client) serveFromCache(o *op) bool {
	s := c.sess
	f, ok := s.cache[filePath(o.idx)]
	if !ok || !s.k.Safe(c.localTime()) {
		return false
	}
	c.cur = nil
	w := c.w
	w.res.CachedReads++
	w.check.cachedRead(c, filePath(o.idx), f)
	c.lastGen[o.idx] = f.gen
	out := modelOutput{ok: true, value: f.value, gen: f.gen}
	w.check.addOp(c.id, o.in, w.now, out, w.now+1)
	w.res.Ops++
	w.tracef("c%d done read#%d from its cache: %q gen %d", c.id, o.id, f.value, f.gen)
	c.think()
	return true
}

// attempt sends the current operation once more — for a call of a
// session, only while the session is safe (the library's calls wait in
// jeopardy). GetTimestamps belongs to no session.
func (c *client) attempt() {
	w := c.w
	o := c.cur
	if o.kind != opCreateSession && o.kind != opTimestamps && !o.sess.k.Safe(c.localTime()) ||
		o.kind == opOpen && !w.setupOK {
		c.waiting = true // resumed when the session is safe again, or the files exist
		return
	}
	c.waiting = false
	o.attempts++
	att := o.attempts
	q := &request{c: c, opID: o.id, attempt: att}
	switch {
	case o.kind == opCreateSession:
		q.kind, q.caching = reqCreateSession, true
		o.sent = c.local()
	case o.kind == opRead:
		q.kind, q.handle, q.cache = reqRead, o.handle, true
		o.cacheGen = o.sess.cacheGen
	case o.kind == opTimestamps:
		q.kind, q.count = reqTimestamps, o.count
	case o.wait:
		q.kind, q.cmd, q.rid = reqAcquire, o.cmd, o.rid
		q.waitMs = max((o.waitEnd-c.local()+ms-1)/ms, 1)
	default:
		q.kind, q.cmd = reqCommand, o.cmd
	}
	o.sentTo = c.target()
	c.deliver(o.sentTo, q)
	timeout := w.between(100*ms, 200*ms)
	if o.wait {
		timeout += q.waitMs * ms // parked up to its wait
	}
	if o.kind == opTimestamps && o.patient && w.now < w.faultsEnd {
		timeout = min(w.between(int64(w.lease), 2*int64(w.lease)), max(timeout, w.faultsEnd-w.now))
	}
	to := o.sentTo
	w.after(timeout, func() {
		if c.cur == o && o.attempts == att && !c.waiting {
			c.guess.Unreachable(addrOf(to)) // as the library's classify does on a timeout
			c.attempt()
		}
	})
}

// deliver sends q to replica target: a down replica refuses the
// connection at once (a reset), a paused one says nothing.
func (c *client) deliver(target uint64, q *request) {
	w := c.w
	w.net.sendClient(c.id, target, func() {
		r := w.replicas[target-1]
		if !r.up {
			w.net.sendClient(c.id, target, func() {
				c.onReply(reply{kind: replyReset, opID: q.opID, attempt: q.attempt, from: target})
			})
			return
		}
		r.do(func() { r.m.onRequest(q) }, false)
	})
}

func (c *client) onReply(rep reply) {
	if s := c.sess; s != nil && rep.opID == kaOpID(s) {
		c.onKeepAlive(s, rep)
		return
	}
	switch rep.opID >> 61 {
	case 2, 3:
		c.onLocate(rep)
		return
	case 1:
		c.onWatch(rep)
		return
	}
	w := c.w
	o := c.cur
	if o == nil || rep.opID != o.id || rep.attempt != o.attempts {
		return // an older attempt's answer; a newer one is out
	}
	switch rep.kind {
	case replyNotMaster:
		if !c.guess.Redirect(addrOf(rep.from), addrOf(rep.hint)) {
			c.locate(false) // no hint to follow: ask the replicas, as the library does
		}
		w.after(w.between(0, 2*ms), func() {
			if c.cur == o && o.attempts == rep.attempt {
				c.attempt()
			}
		})
		return
	case replyBusy, replyReset, replyStale:
		if rep.kind == replyReset {
			c.guess.Unreachable(addrOf(rep.from))
		}
		c.locate(false)
		w.after(w.between(5*ms, 30*ms), func() {
			if c.cur == o && o.attempts == rep.attempt {
				c.attempt()
			}
		})
		return
	case replyExpired:
		// The cell ended the session: whatever this call did is unknown.
		c.sessionOver(o.sess, "the cell says SESSION_EXPIRED")
		return
	}
	c.cur = nil
	o.finished()
	c.complete(o, rep)
}

func (c *client) complete(o *op, rep reply) {
	w := c.w
	w.tracef("c%d done %v#%d after %d attempts: %s", c.id, o.kind, o.id, o.attempts, describeReply(rep))
	switch o.kind {
	case opCreateSession:
		if rep.res != nil && rep.res.Err != nil {
			w.fail("c%d: CreateSession failed: %v", c.id, rep.res.Err)
			return
		}
		c.sessionCreated(o, rep)
	case opSetupCreate:
		if e := rep.res.Err; e != nil && e.Code != chubby.ErrorCode_EXISTS {
			w.fail("c%d: setup CreateFile %s: %v", c.id, o.path, e)
			return
		}
		if c.id == 0 && o.path == lockPath(nLocks-1) {
			w.setupOK = true
			for _, other := range w.clients[1:] {
				if other.cur != nil && other.waiting {
					other.attempt()
				}
			}
		}
	case opOpen:
		if rep.res.Err != nil {
			w.fail("c%d: setup Open %s: %v", c.id, o.path, rep.res.Err)
			return
		}
		if o.lock {
			o.sess.locks[o.idx] = rep.res.Handle
		} else {
			o.sess.files[o.idx] = rep.res.Handle
			c.lastGen[o.idx] = max(c.lastGen[o.idx], rep.res.Stat.ContentGeneration)
		}
	case opTimestamps:
		w.res.Ops++
		w.check.tsAnswered(c, o.call, o.callEv, rep)
	default:
		c.record(o, rep)
		if rep.res != nil && rep.res.Err != nil && rep.res.Err.Code == chubby.ErrorCode_SESSION_EXPIRED {
			// As the library does: the cell ended the session, or is
			// ending it; its locks go with it.
			c.sessionOver(o.sess, "a call was answered SESSION_EXPIRED")
			return
		}
	}
	if w.done {
		return
	}
	if o.sess != c.sess && o.kind != opCreateSession {
		return // the session ended meanwhile; a new one is being set up
	}
	if c.sess != nil && !c.sess.ready {
		c.nextSetup()
		return
	}
	c.think()
}

// record adds a workload operation to the history and updates the
// client's beliefs.
func (c *client) record(o *op, rep reply) {
	w, s := c.w, o.sess
	out := modelOutput{ok: true}
	if o.kind == opRead {
		if rep.readErr != nil {
			out.ok, out.code = false, fs.Code(rep.readErr)
		} else {
			out.value, out.gen = string(rep.content), rep.stat.ContentGeneration
		}
	} else if e := rep.res.Err; e != nil {
		out.ok, out.code = false, e.Code
		// Any other refusal is the saved answer of the session's command,
		// the outcome of every attempt of it (modelOutput). SESSION_EXPIRED
		// is not saved: the session ended before this copy applied, and an
		// earlier copy, applied before that, may have succeeded.
		out.unknown = e.Code == chubby.ErrorCode_SESSION_EXPIRED
	} else {
		if rep.res.Stat != nil {
			out.gen = rep.res.Stat.ContentGeneration
		}
		if rep.res.Sequencer != nil {
			out.gen = rep.res.Sequencer.LockGeneration
		}
	}
	switch o.kind {
	case opRead:
		if out.ok {
			c.lastGen[o.idx] = out.gen
			if rep.cacheOK && s.cacheGen == o.cacheGen && s.k.Safe(c.localTime()) && !s.over {
				s.cache[filePath(o.idx)] = cachedFile{value: out.value, gen: out.gen}
			}
		}
	case opWrite, opCAS:
		// Write-through: this client's own copy goes.
		s.cacheGen++
		delete(s.cache, filePath(o.idx))
		if out.ok {
			c.lastGen[o.idx] = out.gen
			w.check.writeAcked(filePath(o.idx), out.gen)
		}
	case opAcquire:
		switch {
		case out.ok && !s.over:
			s.holding[o.idx] = rep.res.Sequencer
			w.res.Beliefs++
			w.check.beliefStarts(c, o.idx)
		}
	}
	if w.killedAt > 0 && w.res.Failover == 0 && o.call >= w.killedAt && !o.wait {
		// (A blocking Acquire's time includes its wait for the lock.)
		w.res.Failover = time.Duration(w.now - w.killedAt)
	}
	c.addHistory(o, out)
}

func (c *client) addHistory(o *op, out modelOutput) {
	w := c.w
	w.res.Ops++
	if o.kind == opAcquire || o.kind == opRelease {
		// Locks are checked against what clients believe (check.go), not
		// by porcupine: a session's end releases its locks without any
		// client operation to show it.
		return
	}
	ret := w.now
	if out.unknown {
		ret = farFuture
		w.res.Ambiguous++
	}
	w.check.addOp(c.id, o.in, o.call, out, ret)
}

// --- the session's KeepAlive loop: client/keepalive's Keeper, carried
// out over the simulated network as package client carries it out over
// Kitex ---

// kaOpID names a session's KeepAlives (operations use opSeq numbers).
func kaOpID(s *csession) uint64 { return 1<<63 | uint64(s.id) }

// locOpID names a client's locate rounds.
func locOpID(round uint64) uint64 { return 1<<62 | round }

// addrOf is replica id's address in the master guess ("" for none);
// idOf the other way (0 for none).
func addrOf(id uint64) string {
	if id == 0 {
		return ""
	}
	return fmt.Sprintf("r%d", id)
}

func idOf(addr string) uint64 {
	var id uint64
	fmt.Sscanf(addr, "r%d", &id)
	return id
}

// newKeeper is the session's KeepAlive loop, with the library's
// configuration (DefaultConfig), a grace period of two leases, and the
// world's seeded source for the backoff's jitter.
func (c *client) newKeeper(sent int64, leaseMs, epoch int64) *keepalive.Keeper {
	cfg := keepalive.DefaultConfig(2 * c.w.lease)
	cfg.Jitter = c.w.rng.Float64
	return keepalive.New(cfg, time.Unix(0, sent), time.Duration(leaseMs)*time.Millisecond, epoch)
}

// kaStep ticks the session's Keeper at this instant and carries out its
// Ready, as the library's keepAliveLoop turn does.
func (c *client) kaStep(s *csession) {
	if s.over || c.sess != s {
		return
	}
	now := c.localTime()
	s.k.Tick(now)
	rd := s.k.Ready()
	c.kaEvents(s, rd.Events)
	if rd.End != keepalive.NotEnded {
		c.sessionOver(s, "KeepAlive loop: "+rd.End.String())
		return
	}
	if rd.Cancel {
		c.w.tracef("c%d KeepAlive of session %d moves to %s", c.id, s.id, c.guess.Addr())
	}
	if rd.Send {
		c.sendKeepAlive(s)
	}
	if rd.Locate {
		c.locate(true)
	}
	if rd.Cancel {
		c.kaStep(s) // the Keeper sends the next one at once
		return
	}
	if wake := c.realOf(rd.Wake) + 1; wake != s.kaWake {
		s.kaWake = wake
		c.w.at(max(c.w.now, wake), func() {
			if s.kaWake == wake {
				c.kaStep(s)
			}
		})
	}
}

// kaEvents carries out the Keeper's events: the cache goes at jeopardy and
// at a new master.
func (c *client) kaEvents(s *csession, evs []keepalive.Event) {
	for _, e := range evs {
		switch e.Kind {
		case keepalive.Jeopardy:
			c.w.res.Jeopardy++
			c.w.tracef("c%d session %d in jeopardy", c.id, s.id)
		case keepalive.Safe:
			c.w.tracef("c%d session %d safe again", c.id, s.id)
		case keepalive.MasterChanged:
			c.w.tracef("c%d session %d: master epoch %d", c.id, s.id, e.Epoch)
		}
		if e.Kind != keepalive.Safe {
			s.cacheGen++
			clear(s.cache)
		}
	}
}

// sendKeepAlive sends the KeepAlive the Keeper asked for to the master
// guess. Its RPC timeout is the library's: the lease it may be parked for
// plus the call timeout (here one lease: the simulated leases are short).
func (c *client) sendKeepAlive(s *csession) {
	w := c.w
	target := c.target()
	att := s.k.Sent(c.localTime(), addrOf(target))
	w.tracef("c%d KeepAlive #%d of session %d to r%d (acks invalidation %d)", c.id, att, s.id, target, s.invAcked)
	// The request as the library builds it.
	epoch, item := s.k.Epoch(), &chubby.KeepAliveItem{Session: s.id}
	if inv := s.invAcked; inv > 0 {
		item.AckedInvalidation = &inv
	}
	ka := &chubby.KeepAliveRequest{Sessions: []*chubby.KeepAliveItem{item}, Epoch: &epoch}
	c.deliver(target, &request{c: c, kind: reqKeepAlive, opID: kaOpID(s), attempt: int(att), ka: ka})
	w.after(c.realAfter(s.k.Lease()+w.lease), func() {
		if cur, _, ok := s.k.InFlight(); ok && cur == att && c.sess == s {
			w.tracef("c%d KeepAlive #%d timed out", c.id, att)
			c.guess.Unreachable(addrOf(target))
			s.k.Failed(c.localTime(), att, keepalive.Lost, 0)
			c.kaStep(s)
		}
	})
}

// realAfter is the real time the client's clock takes to count d.
func (c *client) realAfter(d time.Duration) int64 { return int64(float64(d) / c.rate) }

func (c *client) onKeepAlive(s *csession, rep reply) {
	w := c.w
	att := uint64(rep.attempt)
	if cur, _, ok := s.k.InFlight(); !ok || cur != att || s.over {
		return
	}
	w.tracef("c%d KeepAlive #%d answered by r%d: kind %d", c.id, att, rep.from, rep.kind)
	now := c.localTime()
	f, epoch := keepalive.Other, int64(0)
	switch rep.kind {
	case replyNotMaster:
		f = keepalive.Refused
		if c.guess.Redirect(addrOf(rep.from), addrOf(rep.hint)) {
			f = keepalive.Redirected
		}
	case replyStale:
		f, epoch = keepalive.Stale, rep.epoch
	case replyBusy:
		f = keepalive.Lost
	case replyReset:
		f = keepalive.Lost
		c.guess.Unreachable(addrOf(rep.from))
	case replyExpired:
		f = keepalive.Expired
	default:
		if g := rep.grant; g.Error != nil {
			s.k.NoteEpoch(rep.epoch)
			if g.Error.Code == chubby.ErrorCode_SESSION_EXPIRED {
				f = keepalive.Expired
			}
		} else {
			c.answered(s, att, rep)
			c.kaStep(s)
			return
		}
	}
	s.k.Failed(now, att, f, epoch)
	c.kaStep(s)
}

// answered takes a KeepAlive's lease grant, as the library's
// applyKeepAlive does.
func (c *client) answered(s *csession, att uint64, rep reply) {
	w := c.w
	g := rep.grant
	if s.k.NoteEpoch(rep.epoch) {
		c.kaEvents(s, s.k.Events()) // the cache goes before the grant's invalidations apply
	}
	c.heard(addrOf(rep.from), rep.epoch)
	// Invalidations first: the lease this reply extends covers only a
	// cache without what they name.
	if g.IsSetInvalidationSeq() {
		s.cacheGen++
		if g.GetInvalidateAll() {
			clear(s.cache)
		}
		for _, p := range g.GetInvalidations() {
			delete(s.cache, p)
		}
		if g.GetInvalidateAll() {
			s.invAcked = g.GetInvalidationSeq() // as client/cache.go does
		} else {
			s.invAcked = max(s.invAcked, g.GetInvalidationSeq())
		}
	}
	if !s.k.Answered(c.localTime(), att, time.Duration(g.LeaseMs)*time.Millisecond, rep.epoch) {
		return
	}
	c.kaEvents(s, s.k.Events())
	for l := range nLocks {
		if s.holding[l] != nil {
			w.check.beliefStarts(c, l)
		}
	}
	if c.cur != nil && c.waiting {
		c.attempt()
	}
}

// locate starts a locate round as the library's locator runs it (the
// rules are client/locate's): GetMaster, naming the suspect, to every
// known member at once; the round ends when all have answered or
// locateTimeout passed, and the best answer moves the guess. One round
// runs at a time per client, shared as the library shares it: forKeeper
// says the session's Keeper asked for it (Ready.Locate), which then hears
// of its end as its own.
func (c *client) locate(forKeeper bool) {
	w := c.w
	if r := c.round; r != nil {
		r.forKeeper = r.forKeeper || forKeeper
		return
	}
	c.rounds++
	suspect, members := c.guess.RoundStart()
	r := &locRound{id: c.rounds, suspect: suspect, asked: members, forKeeper: forKeeper}
	c.round = r
	w.tracef("c%d locate round %d (suspect %q)", c.id, r.id, suspect)
	for _, a := range members {
		c.deliver(idOf(a), &request{c: c, kind: reqGetMaster, opID: locOpID(r.id), suspect: idOf(suspect)})
	}
	w.after(c.locateTimeout(), func() { c.roundOver(r, 0) })
}

// locateTimeout bounds a round: the library's second per answer, or a
// quarter lease when the simulated lease is short.
func (c *client) locateTimeout() int64 { return int64(min(time.Second, c.w.lease/4)) }

// locRound is a locate round in progress.
type locRound struct {
	id        uint64
	suspect   string
	asked     []string
	answers   []locate.Answer
	forKeeper bool
	phase     int // 1 once the seeds are asked too (Guess.Fallback)
	over      bool
}

// onLocate takes one replica's answer in a locate round.
func (c *client) onLocate(rep reply) {
	r := c.round
	if r == nil || rep.opID != locOpID(r.id) || r.over {
		return
	}
	a := locate.Answer{From: addrOf(rep.from), Answered: rep.kind != replyReset}
	if rep.kind == replyOK {
		a.Master, a.Epoch, a.Members = addrOf(rep.hint), rep.epoch, rep.members
	}
	r.answers = append(r.answers, a)
	if len(r.answers) == len(r.asked) {
		c.roundOver(r, r.phase)
	}
}

// roundOver ends phase phase of a locate round. When no member answered
// at all, the seeds not asked yet are asked for as long again, as the
// library's round does; otherwise the round is over: its best answer
// updates the known members and is heard, the guess moves, and the
// session's Keeper is told.
func (c *client) roundOver(r *locRound, phase int) {
	if r.over || phase != r.phase {
		return
	}
	if r.phase == 0 {
		if seeds := c.guess.Fallback(r.asked, r.answers); len(seeds) > 0 {
			r.phase = 1
			r.asked = append(r.asked, seeds...)
			for _, a := range seeds {
				c.deliver(idOf(a), &request{c: c, kind: reqGetMaster, opID: locOpID(r.id), suspect: idOf(r.suspect)})
			}
			c.w.after(c.locateTimeout(), func() { c.roundOver(r, 1) })
			return
		}
	}
	r.over = true
	c.round = nil
	best, ok := c.guess.Best(r.answers)
	if ok {
		c.guess.Adopt(best.From, best.Master, best.Members)
		c.heard(best.Master, best.Epoch)
	}
	c.guess.RoundOver(r.suspect, best.Master)
	c.w.tracef("c%d locate round %d: %q epoch %d", c.id, r.id, best.Master, best.Epoch)
	if s := c.sess; s != nil && !s.over {
		s.k.Located(c.localTime(), best.Master, best.Epoch, r.forKeeper)
		c.kaStep(s)
	}
}

// heard is the library's locator.heard over the guess (Guess.Heard): a
// newer master's epoch moves the guess there and sends the call attempt
// in flight elsewhere again there (not at the first epoch heard). It
// reports news.
func (c *client) heard(addr string, epoch int64) bool {
	news, first := c.guess.Heard(addr, epoch)
	if !news {
		return false
	}
	id := idOf(addr)
	if o := c.cur; !first && o != nil && !c.waiting && o.attempts > 0 && o.sentTo != id {
		c.w.tracef("c%d resends %v#%d to r%d, the master of epoch %d", c.id, o.kind, o.id, id, epoch)
		c.attempt()
	}
	return true
}

// The master watch, as the library keeps it (client/watch.go): one
// GetMaster parked at a replica other than the master guess, naming the
// guess as unreachable, which that replica holds until it knows another
// master (up to watchHold). News moves the guess (heard) and reaches the
// session's Keeper as somebody else's locate round.
const (
	watchHold        = int64(15 * time.Second)
	watchMinInterval = int64(time.Second)
	watchRetryMax    = int64(2 * time.Second)
)

// watchOpID names a client's master watches.
func watchOpID(seq uint64) uint64 { return 1<<61 | seq }

// startWatch starts the master watch once, at the client's first
// session, at a replica drawn at random (as the library spreads them).
func (c *client) startWatch() {
	if c.watching {
		return
	}
	c.watching = true
	c.guess.StartWatchAt(c.w.intn(len(c.guess.Members())))
	c.parkWatch()
}

// parkWatch sends the next watch to a replica other than the guess
// (Guess.WatchTarget), naming the guess as unreachable.
func (c *client) parkWatch() {
	w := c.w
	target, cur, epoch := c.guess.WatchTarget()
	if target == "" {
		w.after(watchMinInterval, c.parkWatch)
		return
	}
	c.watchSeq++
	seq, start := c.watchSeq, w.now
	c.deliver(idOf(target), &request{c: c, kind: reqGetMaster, opID: watchOpID(seq), suspect: idOf(cur), hold: watchHold})
	// The library's RPC timeout: the hold plus the call timeout.
	w.after(watchHold+int64(10*time.Second), func() {
		if c.watchSeq == seq {
			c.watchDone(start, cur, epoch, reply{kind: replyReset})
		}
	})
	c.watchCur, c.watchStart, c.watchEpoch = cur, start, epoch
}

// onWatch takes a watch's answer.
func (c *client) onWatch(rep reply) {
	if rep.opID != watchOpID(c.watchSeq) {
		return
	}
	c.watchDone(c.watchStart, c.watchCur, c.watchEpoch, rep)
}

// watchDone handles the end of a watch that named cur and knew epoch, as
// the library's watchLoop does, and parks the next one: at once after
// news, after watchMinInterval without, after a back-off when it failed.
func (c *client) watchDone(start int64, cur string, epoch int64, rep reply) {
	w := c.w
	c.watchSeq++ // the watch is over: a late answer is ignored
	if c.finished {
		return
	}
	if rep.kind != replyOK || rep.hint == 0 {
		c.watchFails++
		d := keepalive.Backoff(time.Duration(watchMinInterval/5), time.Duration(watchRetryMax), c.watchFails-1, w.rng.Float64())
		w.after(int64(d), c.parkWatch)
		return
	}
	c.watchFails = 0
	addr := addrOf(rep.hint)
	if rep.epoch > epoch {
		c.guess.Adopt(addrOf(rep.from), addr, rep.members)
		if c.heard(addr, rep.epoch) {
			w.tracef("c%d master watch: %s is master in epoch %d", c.id, addr, rep.epoch)
			if s := c.sess; s != nil && !s.over {
				s.k.Located(c.localTime(), addr, rep.epoch, false) // announced as a round's end
				c.kaStep(s)
			}
		}
		c.parkWatch()
		return
	}
	if rep.epoch == epoch && addr != cur {
		c.guess.Learned(addr) // the same master, as the cell names it
	}
	w.after(max(0, watchMinInterval-(w.now-start)), c.parkWatch)
}

// sessionOver ends a session: its beliefs and cache go; an operation in
// flight in it has an unknown outcome; the client starts a new session.
func (c *client) sessionOver(s *csession, why string) {
	w := c.w
	if s.over {
		return
	}
	s.over = true
	s.k.Finish(keepalive.CellEnded)
	w.res.Expired++
	w.tracef("c%d session %d expired: %s", c.id, s.id, why)
	s.holding = [nLocks]*chubby.Sequencer{}
	clear(s.cache)
	if o := c.cur; o != nil && o.sess == s {
		c.cur, c.waiting = nil, false
		if o.kind != opRead && o.kind != opOpen && o.kind != opSetupCreate && o.cmd != nil {
			c.addHistory(o, modelOutput{unknown: true})
		}
	}
	if c.sess != s {
		return
	}
	if c.mayStop() {
		c.sess = nil
		if c.cur == nil && !c.finished {
			c.finish()
		}
		return
	}
	c.newSession()
}

func describeReply(rep reply) string {
	switch {
	case rep.session != 0:
		return fmt.Sprintf("from r%d: session %d", rep.from, rep.session)
	case rep.tsCount != 0:
		return fmt.Sprintf("from r%d: timestamps %d..%d", rep.from, rep.tsFirst, rep.tsFirst+rep.tsCount-1)
	case rep.res != nil && rep.res.Err != nil:
		return fmt.Sprintf("from r%d: %v", rep.from, rep.res.Err.Code)
	case rep.res != nil:
		return fmt.Sprintf("from r%d: ok", rep.from)
	case rep.readErr != nil:
		return fmt.Sprintf("from r%d: read %v", rep.from, rep.readErr)
	case rep.stat != nil:
		return fmt.Sprintf("from r%d: read %q gen %d cacheable=%v", rep.from, rep.content, rep.stat.ContentGeneration, rep.cacheOK)
	}
	return fmt.Sprintf("from r%d: kind %d", rep.from, rep.kind)
}
