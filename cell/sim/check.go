package sim

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/replica/vr"
)

const farFuture = math.MaxInt64 / 4

// checker holds the checkers that run during a run and at its end:
//
//   - agreement: every replica applies the same entry at every index, and
//     every snapshot taken or installed at an index has the same bytes;
//   - the oracle: an fs.State applying the committed log (entries any
//     replica applied, so committed by a quorum);
//   - what clients believe, against the oracle and each other (locks,
//     cached reads);
//   - the timestamp oracle: no timestamp handed out twice, and real-time
//     order of the answered calls (tsHandedOut, tsAnswered);
//   - linearizability of the client history (porcupine) at the end;
//   - convergence at the end: every replica at the same state.
type checker struct {
	w          *world
	hashes     map[uint64]uint64
	waiting    map[uint64]vr.Entry
	globalLast uint64
	oracle     *fs.State
	snaps      map[uint64][32]byte
	stamps     map[[2]uint64]uint64 // (index, view) → hash of the entry persisted with it
	hist       []porcupine.Operation
	acked      map[string]int64 // file → highest content generation a client was told it wrote

	handed  []tsRange // every range a master handed out, by first timestamp
	tsCalls []tsRange // the answered calls, in the order their answers were received
	tsMax   []int     // tsMax[i]: the call of tsCalls[:i+1] with the highest last timestamp
}

// tsRange is timestamps first..last, handed out by a master or received
// by a client.
type tsRange struct {
	first, last int64
	replica     uint64
	at          int64 // handed out then (real time)
	// A call's: who called, when it began and when its answer arrived
	// (real time, and the event numbers that order events of one instant).
	client        int
	callAt, retAt int64
	callEv, retEv int
}

func (t tsRange) String() string {
	if t.retAt == 0 {
		return fmt.Sprintf("[%d, %d] from r%d at %v", t.first, t.last, t.replica, time.Duration(t.at))
	}
	return fmt.Sprintf("[%d, %d] from r%d to c%d, call [%v, %v]", t.first, t.last, t.replica, t.client, time.Duration(t.callAt), time.Duration(t.retAt))
}

func newChecker(w *world) *checker {
	return &checker{w: w, hashes: map[uint64]uint64{}, waiting: map[uint64]vr.Entry{},
		oracle: fs.New(fs.DefaultLimits()), snaps: map[uint64][32]byte{}, stamps: map[[2]uint64]uint64{},
		acked: map[string]int64{}}
}

func entryHash(e vr.Entry) uint64 {
	h := fnv.New64a()
	var b [17]byte
	binary.BigEndian.PutUint64(b[:], e.Index)
	binary.BigEndian.PutUint64(b[8:], e.View)
	b[16] = byte(e.Type)
	h.Write(b[:])
	h.Write(e.Data)
	return h.Sum64()
}

// onApply is called for every entry a replica applies (it is committed).
func (k *checker) onApply(r *replica, e vr.Entry) {
	w := k.w
	h := entryHash(e)
	if old, ok := k.hashes[e.Index]; ok {
		if old != h {
			w.fail("agreement: replica %d applied a different entry at index %d (view %d)", r.id, e.Index, e.View)
		}
		return
	}
	k.hashes[e.Index] = h
	k.waiting[e.Index] = e
	advanced := false
	for {
		e, ok := k.waiting[k.globalLast+1]
		if !ok {
			break
		}
		delete(k.waiting, e.Index)
		k.globalLast = e.Index
		advanced = true
		if e.Type == vr.EntryCommand {
			if _, _, err := k.oracle.ApplyBytes(e.Data); err != nil {
				w.fail("oracle: entry %d: %v", e.Index, err)
				return
			}
		}
	}
	if advanced {
		k.safeHoldersHold()
	}
}

// onPersist checks log matching's premise on every entry any replica
// writes to disk: one primary assigns an index once in its view, so one
// (index, view) never names two different entries.
func (k *checker) onPersist(r *replica, e vr.Entry) {
	key := [2]uint64{e.Index, e.View}
	h := entryHash(e)
	if old, ok := k.stamps[key]; ok && old != h {
		k.w.fail("log matching: replica %d persisted a different entry at index %d with view %d", r.id, e.Index, e.View)
		return
	}
	k.stamps[key] = h
}

func (k *checker) onSnapshot(r *replica, index uint64, data []byte) {
	d := sha256.Sum256(data)
	if old, ok := k.snaps[index]; ok && old != d {
		k.w.fail("agreement: replica %d has a different snapshot at index %d", r.id, index)
		return
	}
	k.snaps[index] = d
}

// beliefStarts is called when client c starts believing it holds lock l
// (it was told its Acquire succeeded, or a KeepAlive reply renewed its
// session while it holds l). Mutual exclusion as users rely on it: no other
// client may believe, at this instant of real time and by its own clock,
// that its session is safe and it holds l. Every overlap of two beliefs
// contains the start of one of them, so checking at every start finds it.
//
// A grant that reaches a client whose session is not safe by its clock (a
// reply delayed past its lease: it is in jeopardy) starts no belief yet:
// the client believes nothing in jeopardy, and if the session becomes safe
// again while it holds l, that starts the belief and is checked then.
func (k *checker) beliefStarts(c *client, l int) {
	w := k.w
	if !c.believes(l) {
		return
	}
	for _, o := range w.clients {
		if o != c && o.believes(l) {
			w.fail("mutual exclusion: client %d believes it holds %s (session %d safe until %v) while client %d is granted it (session %d)",
				o.id, lockPath(l), o.sess.id, time.Duration(o.realOf(o.sess.k.LeaseEnd())), c.id, c.sess.id)
			return
		}
	}
	k.safeHoldersHold()
}

// safeHoldersHold checks that a client whose session is safe holds, in
// the committed state, every lock it believes it holds, under the
// sequencer it was given.
func (k *checker) safeHoldersHold() {
	w := k.w
	for _, c := range w.clients {
		for l := range nLocks {
			if !c.believes(l) {
				continue
			}
			seq := c.sess.holding[l]
			got, err := k.oracle.GetSequencer(c.sess.locks[l])
			if err != nil || got.LockGeneration != seq.LockGeneration {
				w.fail("locks: client %d's session %d is safe and it believes it holds %s (generation %d), but in the committed state its handle does not (%v, %v)",
					c.id, c.sess.id, seq.Path, seq.LockGeneration, got, err)
				return
			}
		}
	}
}

// writeAcked records that a client was told its write made path's content
// generation gen.
func (k *checker) writeAcked(path string, gen int64) {
	k.acked[path] = max(k.acked[path], gen)
}

// cachedRead checks a read a client served from its cache: never older
// than a write acknowledged before it.
func (k *checker) cachedRead(c *client, path string, f cachedFile) {
	if f.gen < k.acked[path] {
		k.w.fail("stale cache: client %d (session %d, safe) read %s generation %d %q from its cache after generation %d was acknowledged",
			c.id, c.sess.id, path, f.gen, f.value, k.acked[path])
	}
}

// tsHandedOut checks a range of timestamps a master hands out (Take):
// it is at or below the mark of the committed state (the reservation that
// covers it committed, so every later master starts above it), and no
// range handed out before overlaps it (none is handed out twice).
func (k *checker) tsHandedOut(r *replica, first, n int64) {
	w := k.w
	t := tsRange{first: first, last: first + n - 1, replica: r.id, at: w.now}
	if first < 1 {
		w.fail("oracle: r%d handed out %v", r.id, t)
		return
	}
	if mark := k.oracle.TimestampsReserved(); t.last > mark {
		w.fail("oracle: r%d handed out %v above the committed mark %d", r.id, t, mark)
		return
	}
	i, _ := slices.BinarySearchFunc(k.handed, first, func(h tsRange, f int64) int { return cmp.Compare(h.first, f) })
	for _, j := range []int{i - 1, i} {
		if j >= 0 && j < len(k.handed) && k.handed[j].first <= t.last && t.first <= k.handed[j].last {
			w.fail("oracle: timestamps handed out twice: %v, and before %v", t, k.handed[j])
			return
		}
	}
	k.handed = slices.Insert(k.handed, i, t)
}

// tsAnswered checks the answer a client received to a timestamps call
// that began at callAt (event callEv) in real-time order: if a call's
// answer was received before another call began, every timestamp of the
// later call is larger than every one of the earlier. (The answers are
// checked as they arrive, so every call that must be smaller is in
// tsCalls: it was received before this one began.)
func (k *checker) tsAnswered(c *client, callAt int64, callEv int, rep reply) {
	w := k.w
	t := tsRange{first: rep.tsFirst, last: rep.tsFirst + rep.tsCount - 1, replica: rep.from,
		client: c.id, callAt: callAt, retAt: w.now, callEv: callEv, retEv: w.nevent}
	w.res.TsCalls++
	w.res.Timestamps += rep.tsCount
	// The calls received before this one began: a prefix of tsCalls.
	j := sort.Search(len(k.tsCalls), func(i int) bool { return k.tsCalls[i].retEv >= callEv })
	if j > 0 {
		if before := k.tsCalls[k.tsMax[j-1]]; before.last >= t.first {
			w.fail("oracle: real-time order: c%d's call received %v, which began after the answer %v had been received", c.id, t, before)
			return
		}
	}
	k.tsCalls = append(k.tsCalls, t)
	top := len(k.tsCalls) - 1
	if top > 0 && k.tsCalls[k.tsMax[top-1]].last > t.last {
		top = k.tsMax[top-1]
	}
	k.tsMax = append(k.tsMax, top)
}

func (k *checker) addOp(client int, in modelInput, call int64, out modelOutput, ret int64) {
	k.hist = append(k.hist, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
}

// final runs the end-of-run checks.
func (k *checker) final() {
	w := k.w
	if !k.converged() || !k.noOrphanLocks() {
		return
	}
	// Linearizability.
	for i := range k.hist {
		if k.hist[i].Return == farFuture {
			k.hist[i].Return = w.now + 1
		}
	}
	res, _ := porcupine.CheckOperationsVerbose(model(), k.hist, 30*time.Second)
	switch res {
	case porcupine.Illegal:
		w.fail("linearizability: the client history is not linearizable (%d operations)\n%s", len(k.hist), k.describeHistory())
	case porcupine.Unknown:
		w.fail("linearizability: porcupine timed out on %d operations", len(k.hist))
	}
}

// converged checks convergence, and the operator's removals against the
// final configuration: every replica of the final configuration is up,
// normal, in one view, at the same applied index and state as the
// oracle. (Replicas outside it — spares never added, replicas removed —
// wait for a primary that adds them.)
func (k *checker) converged() bool {
	w := k.w
	members, retired := w.finalConfig()
	if members == nil {
		w.fail("convergence: no replica knows a configuration at the end: %s", w.describeReplicas())
		return false
	}
	w.checkRemovals(members, retired)
	var final []*replica
	for _, r := range w.replicas {
		if members.Contains(r.id) {
			final = append(final, r)
		}
	}
	var ref []byte
	views := map[uint64]bool{}
	for _, r := range final {
		if !r.up {
			w.fail("convergence: replica %d is down at the end", r.id)
			return false
		}
		i := r.d.Node().Info()
		if i.Status != vr.StatusNormal || r.d.Applied() != k.globalLast {
			w.fail("convergence: replica %d did not catch up: %s (committed log ends at %d)", r.id, r.describe(), k.globalLast)
			return false
		}
		views[i.View] = true
		snap := r.sm.st.Snapshot()
		if ref == nil {
			ref = snap
		} else if !bytes.Equal(ref, snap) {
			w.fail("convergence: replica %d's state differs from replica 1's at index %d", r.id, r.d.Applied())
			return false
		}
	}
	if !bytes.Equal(ref, k.oracle.Snapshot()) {
		w.fail("convergence: the replicas' state differs from the oracle's")
		return false
	}
	if len(views) != 1 {
		w.fail("convergence: replicas end in different views: %s", w.describeReplicas())
		return false
	}
	return true
}

// noOrphanLocks checks that every lock a client's live session holds in
// the final state is one the client was told it got: a lock granted to a
// request whose caller was told it failed (TIMED_OUT, or a call the
// master gave up on) is held by nobody who knows, until the session ends.
func (k *checker) noOrphanLocks() bool {
	w := k.w
	for _, c := range w.clients {
		s := c.sess
		if s == nil || s.over || !s.ready {
			continue
		}
		for l := range nLocks {
			seq, err := k.oracle.GetSequencer(s.locks[l])
			if err == nil && seq != nil && s.holding[l] == nil {
				w.fail("locks: client %d's session %d holds %s (generation %d) at the end, but the client was not told it got it",
					c.id, s.id, seq.Path, seq.LockGeneration)
				return false
			}
		}
	}
	return true
}

func (k *checker) describeHistory() string {
	var b strings.Builder
	for _, o := range k.hist {
		ret := time.Duration(o.Return).String()
		if o.Return >= farFuture {
			ret = "?"
		}
		fmt.Fprintf(&b, "  c%d [%v, %v] %s -> %s\n", o.ClientId, time.Duration(o.Call), ret,
			o.Input.(modelInput).String(), o.Output.(modelOutput).String())
	}
	return b.String()
}

// --- the porcupine model ---

type modelInput struct {
	kind     opKind
	key      string
	client   int
	value    string
	expected int64
}

func (in modelInput) String() string {
	switch in.kind {
	case opWrite:
		return fmt.Sprintf("write(%s, %q)", in.key, in.value)
	case opCAS:
		return fmt.Sprintf("cas(%s, gen=%d, %q)", in.key, in.expected, in.value)
	case opAcquire, opRelease:
		return fmt.Sprintf("%v(%s) by c%d", in.kind, in.key, in.client)
	}
	return fmt.Sprintf("%v(%s)", in.kind, in.key)
}

// modelOutput is what the client was told. A refusal (ok false) of a
// command is definite: fs saves the answer of a sequenced command whether
// it succeeded or was refused, and returns that saved answer to every
// later copy of it, so the first application, which refused it and changed
// nothing, decided every attempt's outcome (see fs's package
// documentation, # Exactly-once).
type modelOutput struct {
	ok    bool
	code  chubby.ErrorCode
	value string
	gen   int64
	// unknown: the client never learned the outcome (its session ended
	// with the call in flight, or the call was refused SESSION_EXPIRED,
	// which fs does not save): it may or may not have taken effect.
	unknown bool
}

func (o modelOutput) String() string {
	s := "ok"
	if !o.ok {
		s = o.code.String()
	}
	if o.value != "" || o.gen != 0 {
		s += fmt.Sprintf(" %q gen=%d", o.value, o.gen)
	}
	if o.unknown {
		s = "unknown"
	}
	return s
}

// modelState is one key's state: a file's content and generation, a
// lock's holder and generation, or whether a name exists.
type modelState struct {
	value  string
	gen    int64
	holder int
	exists bool
}

func initial(key string) modelState {
	switch key[1] {
	case 'f':
		return modelState{gen: 1, holder: -1}
	case 'l':
		return modelState{holder: -1}
	}
	return modelState{holder: -1}
}

func model() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[string][]porcupine.Operation{}
			var keys []string
			for _, o := range h {
				k := o.Input.(modelInput).key
				if _, ok := byKey[k]; !ok {
					keys = append(keys, k)
				}
				byKey[k] = append(byKey[k], o)
			}
			out := make([][]porcupine.Operation, 0, len(keys))
			for _, k := range keys {
				out = append(out, byKey[k])
			}
			return out
		},
		Init: func() []any { return []any{nil} }, // nil: the key's initial state, set by the first step
		Step: func(st any, input any, output any) []any {
			in, out := input.(modelInput), output.(modelOutput)
			var s modelState
			if st == nil {
				s = initial(in.key)
			} else {
				s = st.(modelState)
			}
			return step(s, in, out)
		},
		Equal: func(a, b any) bool { return a == b },
	}
	return nm.ToModel()
}

// step returns the states the operation can lead to from s given what the
// client saw (none: impossible). A refusal took effect as a no-op at one
// instant of its call: it leaves s as it is, and only where s explains it
// (a CAS refused GENERATION_MISMATCH only where the generation is not the
// expected one, and so on).
func step(s modelState, in modelInput, out modelOutput) []any {
	if out.unknown {
		return unknownStep(s, in)
	}
	var next []any
	switch in.kind {
	case opRead:
		if out.ok && out.value == s.value && out.gen == s.gen {
			next = append(next, s)
		}
	case opWrite:
		if out.ok && out.gen == s.gen+1 {
			next = append(next, modelState{value: in.value, gen: s.gen + 1, holder: -1})
		}
		if !out.ok {
			next = append(next, s)
		}
	case opCAS:
		switch {
		case out.ok:
			if s.gen == in.expected && out.gen == s.gen+1 {
				next = append(next, modelState{value: in.value, gen: s.gen + 1, holder: -1})
			}
		case out.code == chubby.ErrorCode_GENERATION_MISMATCH:
			if s.gen != in.expected {
				next = append(next, s)
			}
		}
	case opCreate:
		switch {
		case out.ok:
			if !s.exists {
				next = append(next, modelState{exists: true, holder: -1})
			}
		case out.code == chubby.ErrorCode_EXISTS:
			if s.exists {
				next = append(next, s)
			}
		}
	case opAcquire:
		switch {
		case out.ok:
			if s.holder == -1 && out.gen == s.gen+1 {
				next = append(next, modelState{holder: in.client, gen: out.gen})
			}
		case out.code == chubby.ErrorCode_LOCK_HELD:
			if s.holder != -1 {
				next = append(next, s)
			}
		}
	case opRelease:
		switch {
		case out.ok:
			if s.holder == in.client {
				next = append(next, modelState{holder: -1, gen: s.gen})
			}
		case out.code == chubby.ErrorCode_LOCK_NOT_HELD:
			if s.holder != in.client {
				next = append(next, s)
			}
		}
	}
	return next
}

// unknownStep returns the states an operation of unknown outcome can lead
// to: none of its effect, or all of it where it was possible.
func unknownStep(s modelState, in modelInput) []any {
	next := []any{s}
	switch in.kind {
	case opWrite:
		next = append(next, modelState{value: in.value, gen: s.gen + 1, holder: -1})
	case opCAS:
		if s.gen == in.expected {
			next = append(next, modelState{value: in.value, gen: s.gen + 1, holder: -1})
		}
	case opCreate:
		if !s.exists {
			next = append(next, modelState{exists: true, holder: -1})
		}
	}
	return next
}
