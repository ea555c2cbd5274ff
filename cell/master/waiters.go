package master

import (
	"maps"
	"slices"

	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
)

// Waiters is the master's table of parked Acquire calls: at most one per
// handle, each waiting for the answer to its handle's waiting request in
// the state (fs queues it; a later command grants it or fails it, and says
// so in its Effects). The caller parks a call before it proposes the
// waiting Acquire, reads each applied command's Effects through Applied,
// and answers the calls Applied returns. It is not safe for concurrent
// use.
//
// A call's answer must be its own request's. A handle's earlier request —
// one an earlier master left waiting, or one whose caller gave up and
// whose withdrawal failed — may be woken after a new call is parked and
// before that call's request is queued: such a wake is about the older
// request, and the new call goes on waiting (it is not "queued" yet).
//
// A resend of the parked call (the same request number, rid > 0: its
// client thought the master had moved) takes the parked call's place once
// its request is queued: the request keeps its place in the lock's queue,
// and the earlier call is answered that it was superseded.
//
// Every attempt of one request must find out what became of it, and none
// may queue it again for nobody: a resend is told to come again while the
// request is on its way to the log or being withdrawn (Finishing), and an
// attempt of a request answered for certain (Answered) is Stale — sent
// before the answer and delivered after it — and must be answered from the
// state, not proposed.
type Waiters struct {
	max int
	m   map[int64]*waiter // by handle id
	// answered holds the (handle, request number) pairs whose Acquire
	// had a definite answer (Answered); order lists them oldest first, to
	// bound it (maxAnswered).
	answered map[answer]struct{}
	order    []answer
}

type waiter struct {
	token     any
	rid       int64
	queued    bool // its request is queued in the state (fs.Effects.Queued)
	finishing bool // its wait is over and its request being withdrawn (Finishing)
}

// ErrSuperseded answers a parked call whose caller sent the same request
// again (the same handle and request number): the resend waits in its
// place (Park).
var ErrSuperseded = fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "this Acquire was sent again; the resend waits in its place")

// Wake is a parked call's answer: the lock's sequencer, or why not.
type Wake struct {
	Token     any
	Sequencer *chubby.Sequencer
	Err       *chubby.ChubbyError
}

// NewWaiters returns an empty table that parks at most max calls.
func NewWaiters(max int) *Waiters {
	return &Waiters{max: max, m: map[int64]*waiter{}, answered: map[answer]struct{}{}}
}

// answer names one Acquire request: a handle and a request number.
type answer struct{ handle, rid int64 }

// maxAnswered bounds the requests Answered remembers; the oldest go first.
const maxAnswered = 1 << 16

// Answered records that handle's Acquire with request number rid (> 0)
// had a definite answer: granted, refused by the state or this table, or
// TIMED_OUT once its withdrawal applied. An attempt of it that arrives
// later (sent before the answer, and delayed) is Stale.
func (w *Waiters) Answered(handle, rid int64) {
	k := answer{handle, rid}
	if rid <= 0 {
		return
	}
	if _, ok := w.answered[k]; ok {
		return
	}
	if len(w.order) >= maxAnswered {
		delete(w.answered, w.order[0])
		w.order = w.order[1:]
	}
	w.order = append(w.order, k)
	w.answered[k] = struct{}{}
}

// Definite reports whether an Acquire's answer settles its request, so
// that Answered records it: the lock granted (nil), or refused by the
// state or this table, or TIMED_OUT once withdrawn. Not NOT_MASTER or
// UNAVAILABLE, after which the request may still wait, nor INTERNAL.
func Definite(err *chubby.ChubbyError) bool {
	if err == nil {
		return true
	}
	switch err.Code {
	case chubby.ErrorCode_NOT_MASTER, chubby.ErrorCode_UNAVAILABLE, chubby.ErrorCode_INTERNAL:
		return false
	}
	return true
}

// Stale reports whether an Acquire attempt of handle with request number
// rid belongs to a request already answered for certain (Answered). It
// must not be proposed: its request would wait again, and be granted to
// nobody who hears of it. Its caller (a resend whose answer was lost, or
// a delayed attempt nobody waits for) is answered from the state: the
// lock's sequencer if the handle holds it, else TIMED_OUT.
func (w *Waiters) Stale(handle, rid int64) bool {
	_, ok := w.answered[answer{handle, rid}]
	return rid > 0 && ok
}

// Park parks a call (token) for handle, with the request number rid of
// its Acquire (0: none). A resend (the same rid) of a call whose request
// is queued takes its place and comes back reattached, with the
// superseded call's token to answer: nothing is to be proposed for it. It
// fails with LOCK_HELD when the handle has another call parked, and with
// UNAVAILABLE when the table is full or the resend's call has its request
// still on its way to the log or being withdrawn (send it again shortly).
func (w *Waiters) Park(handle, rid int64, token any) (superseded any, reattached bool, err *chubby.ChubbyError) {
	if p, dup := w.m[handle]; dup {
		if rid > 0 && p.rid == rid && p.finishing {
			// Its answer is being settled: the resend hears it when it
			// comes again (Stale), rather than wait anew for nobody.
			return nil, false, fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "handle %d's Acquire (request %d) is being withdrawn; send it again shortly", handle, rid)
		}
		if rid > 0 && p.rid == rid && !p.queued {
			// The resend of a call whose request is still on its way to
			// the log: it takes the call's place once the request is
			// queued. Refused now, it would be told the lock is held while
			// its own request may yet be granted, to nobody who knows.
			return nil, false, fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "handle %d's Acquire (request %d) is still being proposed; send it again shortly", handle, rid)
		}
		if rid <= 0 || p.rid != rid {
			return nil, false, fs.Errorf(chubby.ErrorCode_LOCK_HELD, "handle %d already has an Acquire waiting", handle)
		}
		w.m[handle] = &waiter{token: token, rid: rid, queued: true}
		return p.token, true, nil
	}
	if len(w.m) >= w.max {
		return nil, false, fs.Errorf(chubby.ErrorCode_UNAVAILABLE, "too many parked Acquire calls (%d); retry later", w.max)
	}
	w.m[handle] = &waiter{token: token, rid: rid}
	return nil, false, nil
}

// Finishing marks handle's parked call, if it is still token's, as one
// whose wait is over: its request is being withdrawn, and its answer
// settled from what the withdrawal leaves. It stays in the table until
// Unpark (a wake still answers it), so that a resend waits for the answer
// instead of queueing the request again.
func (w *Waiters) Finishing(handle int64, token any) {
	if p, ok := w.m[handle]; ok && p.token == token {
		p.finishing = true
	}
}

// Unpark forgets handle's parked call if it is still token's.
func (w *Waiters) Unpark(handle int64, token any) {
	if p, ok := w.m[handle]; ok && p.token == token {
		delete(w.m, handle)
	}
}

// Queued reports whether handle's parked call has had its request
// queued in the state.
func (w *Waiters) Queued(handle int64) bool {
	p, ok := w.m[handle]
	return ok && p.queued
}

// Applied takes an applied command's effects and returns the parked calls
// they answer, which leave the table: the wakes of handles whose call's
// own request is queued. The handles the command queued have their call's
// request queued from now on.
func (w *Waiters) Applied(fx fs.Effects) []Wake {
	var wakes []Wake
	for _, k := range fx.Woken {
		p, ok := w.m[k.Handle]
		if !ok || !p.queued {
			// Nobody parked (its caller gave up), or the wake is about an
			// older request of the handle.
			continue
		}
		delete(w.m, k.Handle)
		wakes = append(wakes, Wake{Token: p.token, Sequencer: k.Sequencer, Err: k.Err})
	}
	for _, h := range fx.Queued {
		if p, ok := w.m[h]; ok {
			p.queued = true
		}
	}
	return wakes
}

// Fail empties the table (shutdown, lost mastership) and returns the
// tokens of every call that was parked, to be answered with the reason.
// Their requests stay queued in the state until withdrawn. The tokens
// come in handle order, so that a simulation replays the same.
func (w *Waiters) Fail() []any {
	hs := slices.Sorted(maps.Keys(w.m))
	toks := make([]any, 0, len(hs))
	for _, h := range hs {
		toks = append(toks, w.m[h].token)
	}
	clear(w.m)
	return toks
}

// Len is the number of calls parked.
func (w *Waiters) Len() int { return len(w.m) }
