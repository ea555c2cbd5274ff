// Package sim is a deterministic simulator of a replicated lock cell: the
// real replication core (replica/vr) and the real state machine (fs) on a
// simulated network, disks and clocks, with clients, fault injection and
// checkers. One seeded random source (PCG) drives everything and nothing
// iterates a map where order matters, so a seed replays exactly.
//
// # What runs
//
// 3 or 5 replicas, each a vr.Node with the driver loop of a real replica:
// Ready → persist (a simulated fsync of 0.1–1.5 ms, sometimes far longer)
// → send → apply to fs → Advance, inputs queued while a Ready persists, a
// Tick every 10 ms of its own clock. Each replica's clock runs at a rate
// within 1±vr.MaxClockDrift of real time (often right at the bounds) from
// its own offset. Snapshots are taken every 8 to 1000 entries (drawn per
// seed) and compacted with or without a margin, so catch-up happens both
// by entries and by snapshot. The vr limits (entries per Prepare,
// pipeline depth, uncommitted window) are sometimes drawn tiny.
//
// 2 to 5 clients, each with one session, issue SetContents, CAS
// (SetContents with expected generation), reads (served by the primary
// from memory under its lease), CreateFile races and exclusive
// TryAcquire/Release on shared files and locks. A client retries after a
// 100–200 ms timeout, follows NOT_MASTER hints, and resends a command
// with the same (session, seq), so fs applies it once.
//
// # Faults
//
// For 2–5 s of virtual time: crashes (half of them of the primary) and
// restarts that keep only what was persisted — a crash during a Ready
// keeps a prefix of its writes in the order the Ready contract gives —,
// power cuts of a majority or all, partitions (primary isolated, primary
// unable to send, primary unable to receive, one replica isolated, random
// splits, single one-way links), lossy networks (drops up to 20%,
// duplicates, delays up to 500 ms, so reordering), slow disks. Then the
// network heals, every replica restarts, and clients finish.
//
// # Checkers
//
//   - at every Ready: every message is of a view already on disk; a
//     PrepareOK is of the view on disk, and "normal" only with that view
//     as the last normal view on disk; no (index, view) ever names two
//     entries on any disk; Ready appends are contiguous;
//   - at every apply: every replica applies the same entry at every index
//     (and the same snapshot bytes at every snapshot index); an oracle fs
//     applies the committed log;
//   - at every change of the committed log or of a client's belief: a
//     client that was told it acquired a lock and has not sent Release
//     holds it in the committed state under its sequencer, and no two do
//     (sessions never expire here, so nothing else frees a lock);
//   - no vr.Hooks.Dropped ever (correct peers send nothing malformed), no
//     invariant panic;
//   - liveness: every client operation completes within SettleTime (5 s)
//     of the faults ending;
//   - at the end: every replica normal in one view, at the same index and
//     the same fs state as the oracle; the client history linearizable
//     (porcupine, per key: file contents and generations, lock holder and
//     generation, name existence; reads included).
//
// A refusal (GENERATION_MISMATCH, LOCK_HELD, EXISTS) of a command sent more
// than once is checked as an unknown outcome until the session's next
// success: fs saves only successful results for exactly-once, so another
// attempt may still succeed after it (Options.StrictRefusals shows it).
//
// # Running
//
//	go test ./replica/sim                       # 1000 seeds (500 under -race)
//	go test ./replica/sim -run TestSim -seeds=20000 -seedbase=1
//	CHUBBY_SIM_SEEDS=5000 go test ./replica/sim -run TestSim
//	go test ./replica/sim -run TestSim -seed=12345 -v            # replay one
//	go test ./replica/sim -run TestSim -seed=12345 -v -simtrace  # with every event
package sim

import (
	"container/heap"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/chubbygo/chubby/replica/vr"
)

// Options configure one run. Zero fields are chosen from the seed.
type Options struct {
	Seed     uint64
	Replicas int // 3 or 5
	Clients  int
	// FaultTime is how long faults are injected (virtual time). Then the
	// network heals, every replica restarts, and clients finish.
	FaultTime time.Duration
	// SettleTime bounds how long after the faults stop every client
	// request must have completed.
	SettleTime time.Duration
	// Trace, if set, receives a line per notable event.
	Trace io.Writer
	// NoFaults disables fault injection (a baseline run).
	NoFaults bool
	// StrictRefusals makes the checker trust every refusal a client
	// receives, even when other attempts of the same command may still be
	// applied. The fs keeps only successful results for exactly-once, so
	// this finds histories that are not linearizable; it exists to show
	// why the default treats such refusals as unknown outcomes.
	StrictRefusals bool
	// KillPrimaryAt, with NoFaults, crashes the primary once at that time
	// (it restarts when the faults end) and measures Result.Failover.
	KillPrimaryAt time.Duration
}

// Result summarizes a run. Err is the first checker failure, nil when all
// passed.
type Result struct {
	Seed        uint64
	Replicas    int
	Clients     int
	Ops         int // client operations completed
	Ambiguous   int // operations whose refusal may hide a later success
	Entries     uint64
	ViewChanges uint64
	Crashes     int
	Snapshots   uint64 // snapshots installed from peers
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
	s := fmt.Sprintf("seed=%d replicas=%d clients=%d ops=%d ambiguous=%d entries=%d view-changes=%d crashes=%d snapshot-installs=%d events=%d virtual=%v settle=%v",
		r.Seed, r.Replicas, r.Clients, r.Ops, r.Ambiguous, r.Entries, r.ViewChanges, r.Crashes, r.Snapshots, r.Events, r.VirtualTime, r.Settle)
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
	opt    Options
	rng    *rand.Rand
	now    int64
	events eventHeap
	seq    uint64
	nevent int

	cfg      vr.Config
	replicas []*replica
	clients  []*client
	net      network

	faultsEnd int64
	killedAt  int64 // KillPrimaryAt happened then (0: not yet)
	deadline  int64
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
	w := &world{opt: opt, rng: rand.New(rand.NewPCG(opt.Seed, opt.Seed^0x9e3779b97f4a7c15))}
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
	w.res.Events = w.nevent
	w.res.VirtualTime = time.Duration(w.now)
	for _, r := range w.replicas {
		w.res.ViewChanges += r.stats.ViewChanges
		w.res.Snapshots += r.stats.SnapshotsInstalled
		if r.up {
			st := r.core.Stats()
			w.res.ViewChanges += st.ViewChanges
			w.res.Snapshots += st.SnapshotsInstalled
		}
	}
	w.res.Entries = w.check.globalLast
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

func (w *world) after(d int64, fn func()) { w.at(w.now+d, fn) }

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

func (w *world) setup() {
	o := &w.opt
	if o.Replicas == 0 {
		o.Replicas = []int{3, 3, 5}[w.intn(3)]
	}
	if o.Clients == 0 {
		o.Clients = 2 + w.intn(4)
	}
	if o.FaultTime == 0 {
		o.FaultTime = time.Duration(w.between(2000*ms, 5000*ms))
	}
	if o.SettleTime == 0 {
		o.SettleTime = 5 * time.Second
	}
	w.faultsEnd = int64(o.FaultTime)
	w.deadline = w.faultsEnd + int64(o.SettleTime)

	var members vr.Members
	for i := 1; i <= o.Replicas; i++ {
		members = append(members, vr.Member{ID: uint64(i), Addr: fmt.Sprintf("r%d:7000", i)})
	}
	w.cfg = vr.Config{InitialMembers: members}
	// Exercise the limits now and then: tiny Prepares, shallow pipelines,
	// a small uncommitted window.
	if w.chance(0.3) {
		w.cfg.MaxPrepareEntries = 1 + w.intn(4)
	}
	if w.chance(0.3) {
		w.cfg.MaxInflightPrepares = 1 + w.intn(2)
	}
	if w.chance(0.2) {
		w.cfg.MaxUncommittedEntries = 4 + w.intn(16)
	}
	w.cfg.CompactMargin = []int{0, 0, 5, 50}[w.intn(4)]
	w.cfg.Hooks.Dropped = func(m *vr.Message, reason string) {
		w.fail("replica %d dropped %v: %s", m.To, m.String(), reason)
	}
	w.cfg.Hooks.Event = func(msg string, args ...any) {
		w.tracef("%s %v", msg, args)
	}
	w.net = newNetwork(w)
	w.check = newChecker(w)
	snapEvery := uint64([]int{8, 20, 50, 1000}[w.intn(4)])
	for i := range o.Replicas {
		r := newReplica(w, uint64(i+1), snapEvery)
		w.replicas = append(w.replicas, r)
		r.start()
	}
	for i := range o.Clients {
		c := newClient(w, i)
		w.clients = append(w.clients, c)
	}
	w.clients[0].startSetup()
	if !o.NoFaults {
		w.scheduleFault()
	}
	w.at(w.faultsEnd, w.endFaults)
	if o.KillPrimaryAt > 0 {
		w.at(int64(o.KillPrimaryAt), func() {
			if p := w.primary(); p != nil {
				p.crash()
				w.killedAt = w.now
			}
		})
	}
	w.tracef("setup: replicas=%d clients=%d faults=%v snapEvery=%d cfg=%+v", o.Replicas, o.Clients, o.FaultTime, snapEvery,
		struct{ PE, IF, UE, CM int }{w.cfg.MaxPrepareEntries, w.cfg.MaxInflightPrepares, w.cfg.MaxUncommittedEntries, w.cfg.CompactMargin})
}

func (w *world) loop() {
	for len(w.events) > 0 && !w.done {
		e := heap.Pop(&w.events).(*event)
		w.now = e.at
		w.nevent++
		e.fn()
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
		if r.up && r.core.Info().IsPrimary && (p == nil || r.core.Info().View > p.core.Info().View) {
			p = r
		}
	}
	return p
}

// allClientsDone is called when a client finishes; when all have, the run
// lets the replicas settle and then stops.
func (w *world) clientFinished() {
	for _, c := range w.clients {
		if !c.finished {
			return
		}
	}
	w.res.Settle = time.Duration(max(0, w.now-w.faultsEnd))
	w.after(1500*ms, func() {
		w.done = true
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

func (w *world) injectFault() {
	switch k := w.intn(100); {
	case k < 18:
		ups := w.upReplicas()
		if len(ups) > 0 {
			r := ups[w.intn(len(ups))]
			if w.chance(0.5) {
				if p := w.primary(); p != nil {
					r = p
				}
			}
			r.crash()
			w.after(w.between(20*ms, 800*ms), func() {
				if !r.up {
					r.start()
				}
			})
		}
	case k < 26:
		for _, r := range w.replicas {
			if !r.up {
				r.start()
				break
			}
		}
	case k < 36:
		if p := w.primary(); p != nil {
			w.net.isolate(p.id, true, true)
			w.tracef("fault: primary %d isolated", p.id)
		}
	case k < 42:
		if p := w.primary(); p != nil {
			w.net.isolate(p.id, true, false)
			w.tracef("fault: primary %d cannot send", p.id)
		}
	case k < 48:
		if p := w.primary(); p != nil {
			w.net.isolate(p.id, false, true)
			w.tracef("fault: primary %d cannot receive", p.id)
		}
	case k < 55:
		id := uint64(1 + w.intn(len(w.replicas)))
		w.net.isolate(id, true, true)
		w.tracef("fault: replica %d isolated", id)
	case k < 62:
		w.net.split()
	case k < 64:
		// One-way loss between two random replicas.
		a, b := uint64(1+w.intn(len(w.replicas))), uint64(1+w.intn(len(w.replicas)))
		if a != b {
			w.net.blocked[[2]uint64{a, b}] = true
			w.tracef("fault: link %d→%d cut", a, b)
		}
	case k < 80:
		w.net.heal()
		w.tracef("fault: network healed")
	case k < 92:
		w.net.quality()
	case k < 97:
		// Hold a replica's disk: its fsyncs become slow for a while.
		r := w.replicas[w.intn(len(w.replicas))]
		r.slowDiskUntil = w.now + w.between(50*ms, 400*ms)
		w.tracef("fault: replica %d disk slow", r.id)
	default:
		// A power cut: a majority (or all) crash at once and come back.
		n := len(w.replicas)/2 + 1 + w.intn(len(w.replicas)/2+1)
		w.tracef("fault: power cut of %d replicas", n)
		for _, i := range w.rng.Perm(len(w.replicas))[:n] {
			r := w.replicas[i]
			r.crash()
			w.after(w.between(10*ms, 300*ms), func() {
				if !r.up {
					r.start()
				}
			})
		}
	}
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
	w        *world
	blocked  map[[2]uint64]bool // directed replica links that lose everything
	drop     float64
	dup      float64
	slow     float64 // chance of an extra delay of a few ms
	verySlow float64 // chance of a delay of hundreds of ms (reordering)
}

func newNetwork(w *world) network {
	n := network{w: w, blocked: map[[2]uint64]bool{}}
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

func (n *network) heal() { clear(n.blocked) }

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

// sendClient carries a client request or reply: delayed, sometimes lost,
// never partitioned (clients are elsewhere).
func (n *network) sendClient(fn func()) {
	w := n.w
	if w.chance(n.drop / 2) {
		return
	}
	w.after(n.delay(), fn)
}

var _ = slices.Sort[[]int]
