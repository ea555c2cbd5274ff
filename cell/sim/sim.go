// Package sim is a deterministic simulator of a lock cell: the code that
// ships — the replica driver (replica.Driver) around the protocol core
// (replica/vr), the state machine (fs), the master's session lease table,
// its change pipeline with the cache and write tables, its parked
// Acquires, its timestamp oracle and the rules of its calls (cell/master)
// and the client's KeepAlive loop, lease rules, master guess and request
// numbers (client/keepalive, client/lease, client/locate, client/rid) —
// on simulated clocks, disks and networks,
// with clients, faults and checkers. One seeded random source (PCG) drives everything and nothing
// iterates a map where order matters, so a seed replays exactly.
//
// # What runs
//
// 3 or 5 replicas, each a replica.Driver whose Disk is a simulated disk
// (writes in order, 0.1–1.5 ms fsyncs, sometimes far longer; async writes
// of the primary joined as the real disk writer joins them; snapshots
// stored in the background, landing 1–200 ms later) and whose clock runs
// at a rate within 1±vr.MaxClockDrift of real time (often right at the
// bounds) from its own offset. On top of each replica, what the cell's
// handlers do, carried out on simulated timers and proposals (master.go):
// failover duties, CreateSession, and KeepAlive through master.Leases by
// the cell's master.KeepAliveCall (parked, answered only under the master
// lease held at that moment), GetMaster by master.NameMaster, blocking
// Acquires by master.AcquireCall with their calls parked in
// master.Waiters (acquire.go), lease expiry proposing EndSession,
// lock-delay Ticks, every change through master.Pipeline as the cell's
// submit puts it (an EndSession drains its session's commands, the
// command is stamped and the caches it reaches invalidated before it is
// proposed, in the view the invalidation waited in, and an uncertain
// outcome holds its place), and the timestamp oracle (oracle.go) as
// cell/oracle.go drives master.Oracle, each call by master.TimestampsCall:
// Reset at the failover duties from
// the mark in the state (fs.State.TimestampsReserved), Stop when
// mastership ends, GetTimestamps answered from Take only under the master
// lease held at that moment, a ReserveTimestamps proposed when Want says
// so, its end reported by term (Reserved, Failed), calls that find the
// window empty waiting for the next reservation (at most 8 times). A
// reservation adds 3, 10 or 100 timestamps or the cell's default (from
// the seed).
//
// 2 to 5 clients, each with one session at a time kept alive by the
// library's KeepAlive loop (client/keepalive's Keeper, carried out over
// the simulated network with the library's master guess, locate rounds
// and master watch, client/locate) under the rules of client/lease:
// the local lease counts from the send, jeopardy when it runs out (the
// cache is flushed), a grace period of two leases, expiry (then the client
// starts a new session). Each client's
// clock drifts too. They issue SetContents, CAS (SetContents with
// expected generation), reads (cached while the session is safe),
// CreateFile races and exclusive TryAcquire/Release with lock-delay, and
// now and then GetTimestamps of 1–5. Their calls go to the master guess
// and are retried by a model of the library's call retry (not its code
// yet): after a 100–200 ms timeout (the guess moves on from a replica that
// did not answer) or 5–30 ms after a refusal (a locate round is started
// when the refusal named no master to follow), with a command resent
// under the same (session, seq), numbered with its floor by the library's
// client/rid, so fs applies it once. In two thirds of the seeds one or two more
// clients (counted in clients=) use the oracle alone, without a session,
// one call after another, as a transaction coordinator would; half of all
// timestamps calls are patient while the faults last (an attempt waits a
// lease or two for its answer, not 100–200 ms), so that answers from a
// master that was paused or cut off reach their callers.
//
// In half the seeds (reconfig.go) one or two more replicas start with an
// empty log, and every 100–700 ms of the faults the primary is asked for
// one configuration change — add a learner, promote it, remove a voter
// (the primary itself a third of the time), demote one, remove a learner
// — through the shipped Driver.ProposeConfig; the end-of-run checks then
// concern the members of the final configuration.
//
// # Faults
//
// For 2–6 s of virtual time: crashes (half of them of the primary) and
// restarts that keep only what was written (a write in flight is torn),
// power cuts, partitions of replicas (primary isolated, primary deaf or
// mute, one replica, random splits, one-way links), partitions that cut
// the primary off with some clients (the minority side keeps its
// clients), disks that fail (the replica fail-stops and is restarted on
// its disk), a master paused for longer than a session lease and resumed,
// CPU stalls (a replica's loop frozen for 0.1–2 s, the primary's half the
// time), lossy networks (drops, duplicates, delays up to 500 ms), slow
// disks. A replica that dials a crashed peer's port is refused (the
// driver's CheckPeer), as on a real network; a paused one still accepts.
// Options.StallsOnly injects only stalls; Options.Forger adds a sender
// that replays, re-addresses and forges replica messages (forger.go).
// Then the network heals, every replica restarts, and clients finish.
//
// # Checkers
//
//   - what clients believe (check.go), the promise users rely on: at no
//     instant of real time do two clients each believe, by their own
//     clocks, that their session is safe and that they hold the same lock;
//     a client whose session is safe holds, in the committed state, every
//     lock it believes it holds; a read served from a client's cache is
//     never older than a write acknowledged before it;
//   - the timestamp oracle (check.go), as users rely on it: no timestamp
//     is handed out twice (every range any master hands out, whether its
//     answer arrives or not; and none above the mark of the committed
//     state), and real-time order: if one call's answer was received
//     before another call began (simulated global time), every timestamp
//     of the later call is larger than every one of the earlier — across
//     failovers, crashes, power cuts, pauses, partitions and
//     reconfiguration;
//   - at every write: no (index, view) names two entries on any disk;
//     writes append contiguously;
//   - at every apply: every replica applies the same entry at every index
//     (and the same snapshot bytes at every snapshot index); an oracle fs
//     applies the committed log;
//   - no vr.Hooks.Dropped ever (correct peers send nothing malformed), no
//     invariant panic;
//   - liveness: every client operation completes within SettleTime of the
//     faults ending;
//   - at the end: every replica normal in one view, at the same index and
//     the same fs state as the oracle; the client history linearizable
//     (porcupine, per key, cached reads included). A refusal a client was
//     given is a definite outcome, a no-op within its call, however many
//     times the command was sent: fs saves refusals for exactly-once as it
//     saves successes. Only a call whose session ended (SESSION_EXPIRED, or
//     the grace period ran out with it in flight) is of unknown outcome.
//
// # Running
//
//	go test ./cell/sim                       # 1000 seeds (500 under -race)
//	go test ./cell/sim -run TestSim -seeds=20000 -seedbase=1
//	CHUBBY_SIM_SEEDS=5000 go test ./cell/sim -run TestSim
//	go test ./cell/sim -run TestSim -seed=12345 -v            # replay one
//	go test ./cell/sim -run TestSim -seed=12345 -v -simtrace  # with every event
package sim

import (
	"container/heap"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"time"

	"github.com/chubbygo/chubby/replica/vr"
)

// Options configure one run. Zero fields are chosen from the seed.
type Options struct {
	Seed     uint64
	Replicas int // 3 or 5
	Clients  int
	// Lease is the session lease. Default: drawn from 0.5, 1 and 2 s.
	Lease time.Duration
	// FaultTime is how long faults are injected (virtual time). Then the
	// network heals, every replica restarts, and clients finish.
	FaultTime time.Duration
	// SettleTime bounds how long after the faults stop every client
	// request must have completed. Default: three view-change timeouts,
	// two session leases and 2 s.
	SettleTime time.Duration
	// Trace, if set, receives a line per notable event.
	Trace io.Writer
	// NoFaults disables fault injection (a baseline run).
	NoFaults bool
	// StallsOnly, if set, injects CPU stalls alone instead of the faults:
	// a replica's loop (the primary's half the time) frozen for 0.1 s to
	// StallsOnly, one every 50–600 ms.
	StallsOnly time.Duration
	// Forger adds a sender that replays, re-addresses and forges replica
	// messages while the faults last (forger.go).
	Forger bool
	// KillPrimaryAt, with NoFaults, crashes the primary once at that time
	// (it restarts when the faults end) and measures Result.Failover.
	KillPrimaryAt time.Duration
	// NoReconfig turns configuration changes off. Otherwise half the
	// seeds (chosen from the seed) run with one or two spare replicas and
	// reconfigurations injected throughout the faults (reconfig.go).
	NoReconfig bool
	// NoBlockingAcquire makes every Acquire a TryAcquire. Otherwise half
	// are blocking Acquires, parked at the master up to their wait
	// (acquire.go), whose time is mostly the wait for the lock: a run
	// that measures Failover turns them off.
	NoBlockingAcquire bool
}

// Result summarizes a run. Err is the first checker failure, nil when all
// passed.
type Result struct {
	Seed        uint64
	Replicas    int
	Clients     int
	Lease       time.Duration
	Ops         int // client operations completed
	Ambiguous   int // operations whose outcome the client could not know
	CachedReads int
	Entries     uint64
	ViewChanges uint64
	CarriedOn   uint64 // epochs a primary entered without a view change
	Crashes     int
	DiskFails   int
	Pauses      int
	Stalls      int    // CPU stalls (pauses of 0.1–2 s) among the pauses
	Forged      int    // messages the forger sent
	Snapshots   uint64 // snapshots installed from peers
	Reconfigs   int    // configuration changes proposed
	Epochs      uint64 // the final configuration's epoch
	Sessions    int    // sessions created
	Expired     int    // sessions that expired (cell or grace period)
	Jeopardy    int    // times a session went into jeopardy
	Beliefs     int    // lock beliefs started (acquired, or safe again holding)
	TsCalls     int    // timestamps calls answered (and the answer received)
	Timestamps  int64  // timestamps they returned
	Events      int
	VirtualTime time.Duration
	// Settle is how long after the faults stopped the last client
	// operation completed.
	Settle time.Duration
	// Failover is the time from KillPrimaryAt to the first client
	// operation completed after it.
	Failover time.Duration
	Err      error
}

func (r Result) String() string {
	s := fmt.Sprintf("seed=%d replicas=%d clients=%d lease=%v ops=%d cached-reads=%d ambiguous=%d entries=%d view-changes=%d crashes=%d disk-fails=%d pauses=%d snapshot-installs=%d sessions=%d expired=%d jeopardy=%d beliefs=%d ts-calls=%d timestamps=%d events=%d virtual=%v settle=%v",
		r.Seed, r.Replicas, r.Clients, r.Lease, r.Ops, r.CachedReads, r.Ambiguous, r.Entries, r.ViewChanges, r.Crashes, r.DiskFails, r.Pauses,
		r.Snapshots, r.Sessions, r.Expired, r.Jeopardy, r.Beliefs, r.TsCalls, r.Timestamps, r.Events, r.VirtualTime, r.Settle)
	if r.Reconfigs > 0 || r.Epochs > 0 {
		s += fmt.Sprintf(" reconfigs=%d epoch=%d", r.Reconfigs, r.Epochs)
	}
	if r.Err != nil {
		s += " FAILED: " + r.Err.Error()
	}
	return s
}

type event struct {
	at  int64
	seq uint64
	fn  func()
}

type eventHeap []*event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(*event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}

type world struct {
	chunkBytes int   // snapshot chunk size of the simulated disks
	tsWindow   int64 // timestamps one oracle reservation adds (0: the default)

	opt Options
	rng *rand.Rand
	// rc draws every reconfiguration decision, apart from rng, so that a
	// run without reconfiguration draws exactly what it drew before they
	// existed (old seeds replay).
	rc       *rand.Rand
	reconfig bool
	// removals are the operator's removals answered (reconfig.go),
	// checked at the end against the final configuration.
	removals []removal
	operated bool // an operator's removal was proposed
	now      int64
	events   eventHeap
	seq      uint64
	nevent   int

	cfg      vr.Config
	lease    time.Duration
	replicas []*replica
	clients  []*client
	net      network
	setupOK  bool // client 0 created the files and locks

	faultsEnd int64
	killedAt  int64   // KillPrimaryAt happened then (0: not yet)
	forger    *forger // Options.Forger
	deadline  int64
	quiet     bool // the run is ending: masters propose nothing more
	done      bool

	check *checker
	err   error
	trace []string // the last lines, printed on failure
	res   Result
}

const ms = int64(time.Millisecond)

// Run runs one simulation and checks it. A panic inside (a broken
// invariant) is a failure of the run, not of the caller.
func Run(opt Options) (res Result) {
	w := &world{opt: opt, rng: rand.New(rand.NewPCG(opt.Seed, opt.Seed^0x9e3779b97f4a7c15)),
		rc: rand.New(rand.NewPCG(opt.Seed^0x5eed, opt.Seed+0x7e57))}
	defer func() {
		if p := recover(); p != nil {
			w.err = nil
			w.fail("panic: %v\n%s", p, debug.Stack())
			res = w.result()
		}
	}()
	w.setup()
	w.loop()
	w.finish()
	return w.result()
}

func (w *world) result() Result {
	w.res.Replicas = len(w.replicas)
	w.res.Clients = len(w.clients)
	w.res.Lease = w.lease
	w.res.Events = w.nevent
	w.res.VirtualTime = time.Duration(w.now)
	if w.forger != nil {
		w.res.Forged = w.forger.sent
	}
	for _, r := range w.replicas {
		w.res.ViewChanges += r.stats.ViewChanges
		w.res.CarriedOn += r.stats.CarriedOn
		w.res.Snapshots += r.stats.SnapshotsInstalled
		if r.up {
			st := r.d.Node().Stats()
			w.res.ViewChanges += st.ViewChanges
			w.res.CarriedOn += st.CarriedOn
			w.res.Snapshots += st.SnapshotsInstalled
		}
	}
	if w.check != nil {
		w.res.Entries = w.check.globalLast
	}
	if w.err != nil && len(w.trace) > 0 {
		w.res.Err = fmt.Errorf("%w\nlast events:\n%s", w.err, strings.Join(w.trace, "\n"))
	} else {
		w.res.Err = w.err
	}
	w.res.Seed = w.opt.Seed
	return w.res
}

func (w *world) at(t int64, fn func()) {
	w.seq++
	heap.Push(&w.events, &event{at: t, seq: w.seq, fn: fn})
}

func (w *world) after(d int64, fn func()) { w.at(w.now+max(d, 0), fn) }

// fail records the first checker failure and stops the run.
func (w *world) fail(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf("t=%v: "+format, append([]any{time.Duration(w.now)}, args...)...)
		w.tracef("FAIL: %v", w.err)
	}
	w.done = true
}

const traceKeep = 400

func (w *world) tracef(format string, args ...any) {
	if w.opt.Trace == nil && w.done {
		return
	}
	line := fmt.Sprintf("%12v ", time.Duration(w.now)) + fmt.Sprintf(format, args...)
	if w.opt.Trace != nil {
		fmt.Fprintln(w.opt.Trace, line)
	}
	if len(w.trace) >= traceKeep {
		copy(w.trace, w.trace[1:])
		w.trace = w.trace[:traceKeep-1]
	}
	w.trace = append(w.trace, line)
}

func (w *world) intn(n int) int { return w.rng.IntN(n) }

// between returns a uniform duration in [lo, hi).
func (w *world) between(lo, hi int64) int64 {
	if hi <= lo {
		return lo
	}
	return lo + w.rng.Int64N(hi-lo)
}

func (w *world) chance(p float64) bool { return w.rng.Float64() < p }

// drift draws a clock rate within 1±MaxClockDrift, often right at a bound.
func (w *world) drift() float64 {
	eps := vr.MaxClockDrift
	switch w.intn(4) {
	case 0:
		return 1 - eps
	case 1:
		return 1 + eps
	}
	return 1 - eps + 2*eps*w.rng.Float64()
}

func (w *world) setup() {
	w.fillOptions()
	w.cfg = w.vrConfig()
	w.net = newNetwork(w)
	w.check = newChecker(w)
	snapEvery := uint64([]int{8, 20, 50, 1000}[w.intn(4)])
	// Snapshots are stored and sent in chunks of 64 bytes to 1 KiB, so a
	// transfer of a few KiB is cut by the faults at every point. Taken
	// from the seed, not the stream, so older seeds replay as before.
	w.chunkBytes = 64 << (w.opt.Seed % 5)
	// Oracle windows from a few timestamps (a reservation every call or
	// two, some smaller than a call) to the cell's default; from the seed
	// too.
	w.tsWindow = []int64{3, 10, 100, 0}[(w.opt.Seed/5)%4]
	w.startAll(snapEvery)
	w.schedule()
	o := &w.opt
	w.tracef("setup: replicas=%d clients=%d lease=%v faults=%v snapEvery=%d cfg=%+v", o.Replicas, o.Clients, w.lease, o.FaultTime, snapEvery,
		struct{ PE, IF, UE, CM int }{w.cfg.MaxPrepareEntries, w.cfg.MaxInflightPrepares, w.cfg.MaxUncommittedEntries, w.cfg.CompactMargin})
}

// fillOptions draws what the options leave open (replicas, clients, the
// lease, how long the faults last) and sets the run's deadline.
func (w *world) fillOptions() {
	o := &w.opt
	if o.Replicas == 0 {
		o.Replicas = []int{3, 3, 5}[w.intn(3)]
	}
	if o.Clients == 0 {
		o.Clients = 2 + w.intn(4)
	}
	w.lease = o.Lease
	if w.lease == 0 {
		w.lease = []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second}[w.intn(3)]
	}
	if o.FaultTime == 0 {
		o.FaultTime = time.Duration(w.between(2000*ms, 6000*ms))
	}
	if o.SettleTime == 0 {
		// After the faults: a failover on silence (a paused primary
		// resumes only now), perhaps a second one (the next primary in
		// turn was cut off), a new master's full session lease before
		// writes to cached nodes commit, the clients' own back-off, and
		// the 2 s the run lets the replicas settle.
		o.SettleTime = 3*vr.DefaultConfig().ViewChangeTimeout + 2*w.lease + 2*time.Second
	}
	w.faultsEnd = int64(o.FaultTime)
	w.deadline = w.faultsEnd + int64(o.SettleTime)
}

// vrConfig is the replicas' protocol configuration: the initial members,
// limits drawn now and then small, and hooks into the checkers and trace.
func (w *world) vrConfig() vr.Config {
	var members vr.Members
	for i := 1; i <= w.opt.Replicas; i++ {
		members = append(members, vr.Member{ID: uint64(i), ClientAddr: fmt.Sprintf("r%d:7000", i)})
	}
	cfg := vr.Config{InitialMembers: members}
	// Exercise the limits now and then: tiny Prepares, shallow pipelines,
	// a small uncommitted window.
	if w.chance(0.3) {
		cfg.MaxPrepareEntries = 1 + w.intn(4)
	}
	if w.chance(0.3) {
		cfg.MaxInflightPrepares = 1 + w.intn(2)
	}
	if w.chance(0.2) {
		cfg.MaxUncommittedEntries = 4 + w.intn(16)
	}
	cfg.CompactMargin = []int{0, 0, 5, 50}[w.intn(4)]
	cfg.Hooks.Dropped = func(m *vr.Message, reason string) {
		if w.forger == nil {
			w.fail("replica %d dropped %v: %s", m.To, m.String(), reason)
		}
	}
	cfg.Hooks.Event = func(msg string, args ...any) {
		w.tracef("%s %v", msg, args)
	}
	return cfg
}

// startAll starts the replicas (and the spares of a reconfiguring run),
// the clients and the forger.
func (w *world) startAll(snapEvery uint64) {
	o := &w.opt
	for i := range o.Replicas {
		r := newReplica(w, uint64(i+1), snapEvery)
		w.replicas = append(w.replicas, r)
		r.start()
	}
	w.reconfig = !o.NoReconfig && w.rc.IntN(2) == 0
	if w.reconfig {
		w.addSpares(snapEvery)
		// A voter change committed as the faults end is one more master
		// change after them, with its wait for the recovered leases.
		w.deadline += 2 * int64(time.Second)
	}
	for i := range o.Clients {
		w.clients = append(w.clients, newClient(w, i))
	}
	// In two thirds of the seeds one or two clients of the oracle alone.
	for i := range int(o.Seed/7) % 3 {
		c := newClient(w, o.Clients+i)
		c.oracleOnly = true
		w.clients = append(w.clients, c)
	}
	for _, c := range w.clients {
		c.start()
	}
	if o.Forger {
		w.forger = &forger{w: w}
		w.forger.schedule()
	}
}

// schedule sets the faults, the reconfiguration, the end of the faults
// and the primary's kill the options ask for.
func (w *world) schedule() {
	o := &w.opt
	switch {
	case o.StallsOnly > 0:
		w.scheduleStalls(o.StallsOnly)
	case !o.NoFaults:
		w.scheduleFault()
	}
	if w.reconfig {
		w.scheduleReconfig()
	}
	w.at(w.faultsEnd, w.endFaults)
	if o.KillPrimaryAt > 0 {
		w.at(int64(o.KillPrimaryAt), func() {
			if p := w.primary(); p != nil {
				p.crash("killed")
				w.killedAt = w.now
			}
		})
	}
}

// maxEvents bounds one run: a healthy one takes tens of thousands; a run
// past this is spinning (something reschedules itself without time
// passing), which is a bug of its own.
const maxEvents = 2_000_000

func (w *world) loop() {
	for len(w.events) > 0 && !w.done {
		e := heap.Pop(&w.events).(*event)
		w.now = e.at
		w.nevent++
		e.fn()
		if w.nevent > maxEvents && !w.done {
			w.fail("livelock: %d events in %v of virtual time", w.nevent, time.Duration(w.now))
		}
		if w.now > w.deadline && !w.done {
			var pending []string
			for _, c := range w.clients {
				if !c.finished {
					pending = append(pending, c.describe())
				}
			}
			w.fail("liveness: %v after the faults stopped, clients still waiting: %s; replicas: %s",
				time.Duration(w.now-w.faultsEnd), strings.Join(pending, "; "), w.describeReplicas())
		}
	}
}

func (w *world) describeReplicas() string {
	var s []string
	for _, r := range w.replicas {
		s = append(s, r.describe())
	}
	return strings.Join(s, " | ")
}

// primary returns the up replica that is the normal primary of the highest
// view, or nil.
func (w *world) primary() *replica {
	var p *replica
	for _, r := range w.replicas {
		if r.up && r.d.Node().IsPrimary() && (p == nil || r.d.Node().View() > p.d.Node().View()) {
			p = r
		}
	}
	return p
}

// clientFinished is called when a client finishes; when all have, the run
// lets the replicas settle and then stops.
func (w *world) clientFinished() {
	for _, c := range w.clients {
		if !c.finished {
			return
		}
	}
	w.res.Settle = time.Duration(max(0, w.now-w.faultsEnd))
	// Let the replicas settle, then stop the masters proposing (lease
	// expiries, lock-delay Ticks go on by themselves) and let the last
	// commits reach every replica before the final checks.
	w.after(1500*ms, func() {
		w.quiet = true
		w.after(500*ms, func() { w.done = true })
	})
}

// finish runs the end-of-run checkers.
func (w *world) finish() {
	if w.err != nil {
		return
	}
	w.check.final()
}

// --- faults ---

func (w *world) scheduleFault() {
	w.after(w.between(50*ms, 600*ms), func() {
		if w.now >= w.faultsEnd {
			return
		}
		w.injectFault()
		w.scheduleFault()
	})
}

// restartLater brings a stopped replica back after d.
func (w *world) restartLater(r *replica, d int64) {
	w.after(d, func() {
		if !r.up {
			r.start()
		}
	})
}

// injectFault injects one fault, drawn by weight (out of 100).
func (w *world) injectFault() {
	switch k := w.intn(100); {
	case k < 14:
		w.crashOne()
	case k < 20:
		for _, r := range w.replicas {
			if !r.up {
				r.start()
				break
			}
		}
	case k < 57:
		w.partition(k)
	case k < 70:
		w.net.heal()
		w.tracef("fault: network healed")
	case k < 80:
		w.net.quality()
	case k < 89:
		w.diskFault(k)
	case k < 91:
		// A CPU stall: a replica's loop frozen for 0.1–2 s (a loaded
		// machine, a long GC), the primary half the time.
		w.stall(2 * time.Second)
	case k < 94:
		w.pauseOne()
	case k < 97:
		w.powerCut()
	default:
		// A client is cut off from every replica for a while.
		c := w.clients[w.intn(len(w.clients))]
		for _, r := range w.replicas {
			w.net.clientCut[[2]uint64{uint64(c.id), r.id}] = true
		}
		w.tracef("fault: client %d cut off", c.id)
	}
}

// crashOne crashes a replica that is up, the primary half the time, and
// restarts it later.
func (w *world) crashOne() {
	ups := w.upReplicas()
	if len(ups) == 0 {
		return
	}
	r := ups[w.intn(len(ups))]
	if w.chance(0.5) {
		if p := w.primary(); p != nil {
			r = p
		}
	}
	r.crash("crash")
	w.restartLater(r, w.between(20*ms, 800*ms))
}

// partition cuts links, by injectFault's draw k in [20, 57).
func (w *world) partition(k int) {
	switch {
	case k < 28:
		if p := w.primary(); p != nil {
			w.net.isolate(p.id, true, true)
			w.tracef("fault: primary %d isolated", p.id)
		}
	case k < 33:
		if p := w.primary(); p != nil {
			w.net.isolate(p.id, true, false)
			w.tracef("fault: primary %d cannot send", p.id)
		}
	case k < 38:
		if p := w.primary(); p != nil {
			w.net.isolate(p.id, false, true)
			w.tracef("fault: primary %d cannot receive", p.id)
		}
	case k < 44:
		// The outside tester's partition: the primary and some clients on
		// one side, the other replicas and clients on the other.
		if p := w.primary(); p != nil {
			w.net.cutOff(p.id)
		}
	case k < 49:
		id := uint64(1 + w.intn(len(w.replicas)))
		w.net.isolate(id, true, true)
		w.tracef("fault: replica %d isolated", id)
	case k < 55:
		w.net.split()
	default:
		// One-way loss between two random replicas.
		a, b := uint64(1+w.intn(len(w.replicas))), uint64(1+w.intn(len(w.replicas)))
		if a != b {
			w.net.blocked[[2]uint64{a, b}] = true
			w.tracef("fault: link %d→%d cut", a, b)
		}
	}
}

// diskFault slows or fails a disk, by injectFault's draw k in [80, 89).
func (w *world) diskFault(k int) {
	if k < 84 {
		// Hold a replica's disk: its fsyncs become slow for a while.
		r := w.replicas[w.intn(len(w.replicas))]
		r.slowDiskUntil = w.now + w.between(50*ms, 400*ms)
		w.tracef("fault: replica %d disk slow", r.id)
		return
	}
	// A disk starts failing: the next write fails, the replica
	// fail-stops, and is restarted on its disk once it is healthy.
	r := w.replicas[w.intn(len(w.replicas))]
	if p := w.primary(); p != nil && w.chance(0.6) {
		r = p
	}
	if r.up {
		r.diskFailing = true
		w.tracef("fault: replica %d disk starts failing", r.id)
	}
}

// pauseOne pauses a replica (SIGSTOP), usually the primary, for longer
// than a session lease, then resumes it (SIGCONT).
func (w *world) pauseOne() {
	r := w.replicas[w.intn(len(w.replicas))]
	if p := w.primary(); p != nil && w.chance(0.7) {
		r = p
	}
	if r.up && !r.paused {
		d := int64(w.lease) + w.between(100*ms, int64(w.lease))
		r.pause(d)
	}
}

// powerCut crashes a majority (or all) at once; they come back soon.
func (w *world) powerCut() {
	n := min(len(w.replicas), len(w.replicas)/2+1+w.intn(len(w.replicas)/2+1))
	w.tracef("fault: power cut of %d replicas", n)
	for _, i := range w.rng.Perm(len(w.replicas))[:n] {
		r := w.replicas[i]
		r.crash("power cut")
		w.restartLater(r, w.between(10*ms, 300*ms))
	}
}

// stall freezes a replica, the primary half the time, for 0.1 s to
// longest.
func (w *world) stall(longest time.Duration) {
	r := w.replicas[w.intn(len(w.replicas))]
	if p := w.primary(); p != nil && w.chance(0.5) {
		r = p
	}
	if r.up && !r.paused {
		w.res.Stalls++
		r.pause(w.between(100*ms, int64(longest)))
	}
}

// scheduleStalls injects only CPU stalls (Options.StallsOnly), every
// 50–600 ms until the faults end.
func (w *world) scheduleStalls(longest time.Duration) {
	w.after(w.between(50*ms, 600*ms), func() {
		if w.now >= w.faultsEnd {
			return
		}
		w.stall(longest)
		w.scheduleStalls(longest)
	})
}

func (w *world) upReplicas() []*replica {
	var ups []*replica
	for _, r := range w.replicas {
		if r.up {
			ups = append(ups, r)
		}
	}
	return ups
}

func (w *world) endFaults() {
	w.net.heal()
	w.net.calm()
	for _, r := range w.replicas {
		r.slowDiskUntil = 0
		r.diskFailing = false
		if r.paused {
			r.resume()
		}
		if !r.up {
			r.start()
		}
	}
	w.tracef("faults end: network healed, all replicas up")
	for _, c := range w.clients {
		c.stopAfterCurrent()
	}
}

// --- the network ---

type network struct {
	w         *world
	blocked   map[[2]uint64]bool // directed replica links that lose everything
	clientCut map[[2]uint64]bool // (client, replica) pairs that cannot talk
	drop      float64
	dup       float64
	slow      float64 // chance of an extra delay of a few ms
	verySlow  float64 // chance of a delay of hundreds of ms (reordering)
}

func newNetwork(w *world) network {
	n := network{w: w, blocked: map[[2]uint64]bool{}, clientCut: map[[2]uint64]bool{}}
	n.calm()
	return n
}

func (n *network) calm() { n.drop, n.dup, n.slow, n.verySlow = 0, 0, 0.02, 0 }

func (n *network) quality() {
	w := n.w
	n.drop = []float64{0, 0.01, 0.05, 0.2}[w.intn(4)]
	n.dup = []float64{0, 0.01, 0.05}[w.intn(3)]
	n.slow = []float64{0.02, 0.1, 0.3}[w.intn(3)]
	n.verySlow = []float64{0, 0.01, 0.05}[w.intn(3)]
	w.tracef("fault: network drop=%v dup=%v slow=%v verySlow=%v", n.drop, n.dup, n.slow, n.verySlow)
}

func (n *network) heal() {
	clear(n.blocked)
	clear(n.clientCut)
}

func (n *network) isolate(id uint64, out, in bool) {
	for _, r := range n.w.replicas {
		if r.id == id {
			continue
		}
		if out {
			n.blocked[[2]uint64{id, r.id}] = true
		}
		if in {
			n.blocked[[2]uint64{r.id, id}] = true
		}
	}
}

// cutOff partitions the replicas into the primary's side (it, and maybe
// one more of five) and the majority, and the clients between the two
// sides: each client keeps reaching one side only.
func (n *network) cutOff(primary uint64) {
	w := n.w
	side := map[uint64]bool{primary: true}
	if len(w.replicas) == 5 && w.chance(0.5) {
		for {
			if id := uint64(1 + w.intn(5)); id != primary {
				side[id] = true
				break
			}
		}
	}
	for _, a := range w.replicas {
		for _, b := range w.replicas {
			if side[a.id] != side[b.id] {
				n.blocked[[2]uint64{a.id, b.id}] = true
			}
		}
	}
	var withPrimary []int
	for _, c := range w.clients {
		minority := w.chance(0.5)
		if minority {
			withPrimary = append(withPrimary, c.id)
		}
		for _, r := range w.replicas {
			if side[r.id] != minority {
				n.clientCut[[2]uint64{uint64(c.id), r.id}] = true
			}
		}
	}
	var ids []uint64
	for _, r := range w.replicas {
		if side[r.id] {
			ids = append(ids, r.id)
		}
	}
	w.tracef("fault: replicas %v and clients %v cut off from the rest", ids, withPrimary)
}

// split cuts the replicas into two random groups.
func (n *network) split() {
	w := n.w
	side := make([]bool, len(w.replicas))
	for i := range side {
		side[i] = w.chance(0.5)
	}
	var a []uint64
	for i, r := range w.replicas {
		for j, q := range w.replicas {
			if side[i] != side[j] {
				n.blocked[[2]uint64{r.id, q.id}] = true
			}
		}
		if side[i] {
			a = append(a, r.id)
		}
	}
	w.tracef("fault: split %v from the rest", a)
}

// delay returns a message latency: loopback-like, sometimes slower.
func (n *network) delay() int64 {
	w := n.w
	d := w.between(30_000, 800_000) // 30–800 µs
	if w.chance(n.slow) {
		d += w.between(ms, 30*ms)
	}
	if w.chance(n.verySlow) {
		d += w.between(100*ms, 500*ms)
	}
	return d
}

// debugMessages, when set (by a test), sees every replica message sent and
// delivered.
var debugMessages func(w *world, what string, m string)

// send carries a replica message: it may be lost, delayed, duplicated.
func (n *network) send(m vr.Message) {
	w := n.w
	if debugMessages != nil {
		debugMessages(w, "send", m.String())
	}
	if w.forger != nil {
		w.forger.observe(m)
	}
	if n.blocked[[2]uint64{m.From, m.To}] || w.chance(n.drop) {
		return
	}
	copies := 1
	if w.chance(n.dup) {
		copies = 2
	}
	for range copies {
		w.after(n.delay(), func() {
			if r := w.replicas[m.To-1]; r.up {
				if debugMessages != nil {
					debugMessages(w, "recv", m.String())
				}
				r.receive(m)
			}
		})
	}
}

// sendClient carries a client request or reply between client c and
// replica r: delayed, sometimes lost, lost entirely across a partition.
func (n *network) sendClient(c int, r uint64, fn func()) {
	w := n.w
	if n.clientCut[[2]uint64{uint64(c), r}] || w.chance(n.drop/2) {
		return
	}
	w.after(n.delay(), fn)
}
