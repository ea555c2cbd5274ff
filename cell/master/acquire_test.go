package master

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// Each case is a blocking Acquire's life at the master, written as the
// inputs an AcquireCall takes and the step each must return (summarised
// by acqStep). The first line is Start's step.

type acqIn struct {
	in   func(a *AcquireCall) AcquireStep
	want string
}

var (
	seq7    = &chubby.Sequencer{LockGeneration: 7, Mode: chubby.LockMode_EXCLUSIVE}
	shared7 = &chubby.Sequencer{LockGeneration: 7, Mode: chubby.LockMode_SHARED}
	waiting = func() *fsm.Result_ { w := true; return &fsm.Result_{Waiting: &w} }
	errOf   = func(c chubby.ErrorCode) *chubby.ChubbyError { return fs.Errorf(c, "%v", c) }
)

func parked(reattached bool, err *chubby.ChubbyError) func(*AcquireCall) AcquireStep {
	return func(a *AcquireCall) AcquireStep { return a.Parked(reattached, err) }
}
func proposed(res *fsm.Result_, err error) func(*AcquireCall) AcquireStep {
	return func(a *AcquireCall) AcquireStep { return a.Proposed(res, err) }
}
func held(seq *chubby.Sequencer, err error) func(*AcquireCall) AcquireStep {
	return func(a *AcquireCall) AcquireStep { return a.Held(seq, err) }
}
func waits(w bool) func(*AcquireCall) AcquireStep {
	return func(a *AcquireCall) AcquireStep { return a.Waits(w) }
}
func withdrawn(err error) func(*AcquireCall) AcquireStep {
	return func(a *AcquireCall) AcquireStep { return a.Withdrawn(err) }
}
func woken(seq *chubby.Sequencer, err error) func(*AcquireCall) AcquireStep {
	return func(a *AcquireCall) AcquireStep { return a.Woken(seq, err) }
}
func resumed(a *AcquireCall) AcquireStep  { return a.Resumed() }
func waitOver(a *AcquireCall) AcquireStep { return a.WaitOver() }

// acqStep summarises a step: its Do, its flags, and an answer's outcome.
func acqStep(s AcquireStep) string {
	gen := ""
	if s.Do == DoAnswer && s.Seq != nil {
		gen = fmt.Sprintf("gen=%d", s.Seq.LockGeneration)
	}
	return words(s.Do, on(s.Unpark, "unpark"), on(s.Lease, "lease"), on(s.Finishing, "finishing"),
		on(s.Pause > 0, s.Pause.String()), on(s.Do == DoWait, fmt.Sprintf("until=%d", s.Until)),
		gen, code(s.Err), on(s.Do == DoAnswer && s.Record, "record"))
}

// words is a step's summary in the tests of the calls: its Do, then the
// words that are not empty.
func words(do fmt.Stringer, w ...string) string {
	out := []string{do.String()}
	for _, x := range w {
		if x != "" {
			out = append(out, x)
		}
	}
	return strings.Join(out, " ")
}

// on is word if cond holds, else nothing.
func on(cond bool, word string) string {
	if cond {
		return word
	}
	return ""
}

// code is err's code, or nothing.
func code(err error) string {
	if err == nil {
		return ""
	}
	return fs.Code(err).String()
}

func TestAcquireCall(t *testing.T) {
	const start = "park"
	cases := []struct {
		name  string
		stale bool
		steps []acqIn
	}{
		{"granted at once", false, []acqIn{
			{parked(false, nil), "propose"},
			{proposed(&fsm.Result_{Sequencer: seq7}, nil), "answer gen=7 record"},
		}},
		{"queued, then granted", false, []acqIn{
			{parked(false, nil), "propose"},
			{proposed(waiting(), nil), "wait until=1000000100"},
			{woken(seq7, nil), "answer gen=7 record"},
			{waitOver, "nothing"}, // answered: later inputs change nothing
			{withdrawn(nil), "nothing"},
		}},
		{"queued, then failed by the state", false, []acqIn{
			{parked(false, nil), "propose"},
			{proposed(waiting(), nil), "wait until=1000000100"},
			{woken(nil, errOf(chubby.ErrorCode_SESSION_EXPIRED)), "answer SESSION_EXPIRED record"},
		}},
		{"a resend takes the parked call's place", false, []acqIn{
			{parked(true, nil), "wait until=1000000100"},
			{woken(seq7, nil), "answer gen=7 record"},
		}},
		{"the superseded call settles nothing", false, []acqIn{
			{parked(false, nil), "propose"},
			{proposed(waiting(), nil), "wait until=1000000100"},
			{woken(nil, errOf(chubby.ErrorCode_UNAVAILABLE)), "answer UNAVAILABLE"},
		}},
		{"the caller went away: not definite", false, []acqIn{
			{parked(false, nil), "propose"},
			{proposed(nil, context.Canceled), "answer INTERNAL"},
		}},
		{"the table refuses", false, []acqIn{
			{parked(false, errOf(chubby.ErrorCode_UNAVAILABLE)), "answer UNAVAILABLE"},
		}},
		{"the handle has another call parked", false, []acqIn{
			{parked(false, errOf(chubby.ErrorCode_LOCK_HELD)), "answer LOCK_HELD record"},
		}},
		{"wait over, withdrawn: TIMED_OUT is certain", false, []acqIn{
			{parked(false, nil), "propose"},
			{proposed(waiting(), nil), "wait until=1000000100"},
			{waitOver, "withdraw finishing"},
			{withdrawn(nil), "held"},
			{held(nil, nil), "answer TIMED_OUT record"},
		}},
		{"wait over, a grant applied before the withdrawal", false, []acqIn{
			{parked(false, nil), "propose"},
			{proposed(waiting(), nil), "wait until=1000000100"},
			{waitOver, "withdraw finishing"},
			{withdrawn(nil), "held"},
			{held(seq7, nil), "answer gen=7 record"},
		}},
		{"wait over, withdrawal unavailable three times: outcome open", false, []acqIn{
			{parked(false, nil), "propose"},
			{proposed(waiting(), nil), "wait until=1000000100"},
			{waitOver, "withdraw finishing"},
			{withdrawn(errOf(chubby.ErrorCode_UNAVAILABLE)), "pause 20ms"},
			{resumed, "withdraw"},
			{withdrawn(errOf(chubby.ErrorCode_UNAVAILABLE)), "pause 40ms"},
			{resumed, "withdraw"},
			{withdrawn(errOf(chubby.ErrorCode_UNAVAILABLE)), "held lease"},
			{held(nil, errOf(chubby.ErrorCode_UNAVAILABLE)), "answer UNAVAILABLE"},
		}},
		{"wait over, mastership lost: a grant read under the lease still counts", false, []acqIn{
			{parked(false, nil), "propose"},
			{proposed(waiting(), nil), "wait until=1000000100"},
			{waitOver, "withdraw finishing"},
			{withdrawn(errOf(chubby.ErrorCode_NOT_MASTER)), "held lease"},
			{held(seq7, nil), "answer gen=7 record"},
		}},
		{"a wake during the withdrawal answers the call", false, []acqIn{
			{parked(false, nil), "propose"},
			{proposed(waiting(), nil), "wait until=1000000100"},
			{waitOver, "withdraw finishing"},
			{woken(seq7, nil), "answer gen=7 record"},
			{withdrawn(nil), "nothing"},
		}},
		{"refused: the handle holds the lock already", false, []acqIn{
			{parked(false, nil), "propose"},
			{proposed(&fsm.Result_{Err: errOf(chubby.ErrorCode_LOCK_HELD)}, nil), "held unpark"},
			{held(seq7, nil), "answer gen=7 record"},
		}},
		{"refused: held in another mode is not held", false, []acqIn{
			{parked(false, nil), "propose"},
			{proposed(nil, errOf(chubby.ErrorCode_LOCK_HELD)), "held unpark"},
			{held(shared7, nil), "waits"},
			{waits(false), "answer LOCK_HELD record"},
		}},
		{"refused: a request nobody is parked on is withdrawn and the Acquire proposed again, once", false, []acqIn{
			{parked(false, nil), "propose"},
			{proposed(nil, errOf(chubby.ErrorCode_LOCK_HELD)), "held unpark"},
			{held(nil, nil), "waits"},
			{waits(true), "withdraw"},
			{withdrawn(nil), "park"},
			{parked(false, nil), "propose"},
			{proposed(nil, errOf(chubby.ErrorCode_LOCK_HELD)), "held unpark"},
			{held(nil, nil), "answer LOCK_HELD record"},
		}},
		{"refused: the stray request's withdrawal fails", false, []acqIn{
			{parked(false, nil), "propose"},
			{proposed(nil, errOf(chubby.ErrorCode_LOCK_HELD)), "held unpark"},
			{held(nil, nil), "waits"},
			{waits(true), "withdraw"},
			{withdrawn(errOf(chubby.ErrorCode_NOT_MASTER)), "answer NOT_MASTER"},
		}},
		{"stale: the handle holds the lock", true, []acqIn{
			{held(seq7, nil), "answer gen=7 record"},
		}},
		{"stale: it does not", true, []acqIn{
			{held(nil, nil), "answer TIMED_OUT record"},
		}},
		{"stale: no master lease to read under", true, []acqIn{
			{held(nil, errOf(chubby.ErrorCode_UNAVAILABLE)), "answer UNAVAILABLE"},
			{parked(false, nil), "nothing"},
		}},
		{"inputs a step does not expect change nothing", false, []acqIn{
			{woken(seq7, nil), "nothing"}, // not parked yet
			{proposed(waiting(), nil), "nothing"},
			{waitOver, "nothing"},
			{parked(false, nil), "propose"},
			{held(seq7, nil), "nothing"},
			{waits(true), "nothing"},
			{resumed, "nothing"},
			{proposed(&fsm.Result_{}, nil), "answer INTERNAL"}, // applied without a sequencer
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			op := &fsm.Acquire{Handle: &chubby.Handle{Id: 3, Path: "/l"}, Mode: chubby.LockMode_EXCLUSIVE, Wait: true}
			a := NewAcquireCall(op, 9, 100*time.Nanosecond, 1_000_000_000, tc.stale)
			first := start
			if tc.stale {
				first = "held lease"
			}
			if got := acqStep(a.Start()); got != first {
				t.Fatalf("Start: %q, want %q", got, first)
			}
			for i, s := range tc.steps {
				if got := acqStep(s.in(a)); got != s.want {
					t.Fatalf("input %d: %q, want %q", i+1, got, s.want)
				}
			}
			if !a.Done() {
				t.Fatalf("not answered at the end")
			}
		})
	}
}

func TestWithdrawalRetriesOnlyUnavailable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want []time.Duration // pauses before each further proposal
	}{
		{nil, nil},
		{errOf(chubby.ErrorCode_NOT_MASTER), nil},
		{context.Canceled, nil},
		{errOf(chubby.ErrorCode_UNAVAILABLE), []time.Duration{20 * time.Millisecond, 40 * time.Millisecond}},
	} {
		var w Withdrawal
		var got []time.Duration
		for range 10 {
			pause, again := w.Failed(tc.err)
			if !again {
				break
			}
			got = append(got, pause)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%v: pauses %v, want %v", tc.err, got, tc.want)
		}
		if len(got)+1 > WithdrawAttempts {
			t.Errorf("%v: %d proposals, over %d", tc.err, len(got)+1, WithdrawAttempts)
		}
	}
}
