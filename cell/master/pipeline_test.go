package master

import (
	"strings"
	"testing"
	"time"

	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// pipeCell is a real fs state behind a Pipeline on a fake clock, the log
// standing in as "apply when the test says so".
type pipeCell struct {
	t    *testing.T
	st   *fs.State
	p    *Pipeline
	now  Time                      // the master's monotonic clock
	ends map[chubby.SessionID]Time // lease ends at this master
	got  map[uint64]Verdict        // verdicts heard
	woke []chubby.SessionID        // sessions woken
	id   uint64
}

var testPipe = PipelineConfig{DrainWait: 30 * time.Second, InvalidateWait: 13 * time.Second, UncertainHold: 20 * time.Second}

func newPipeCell(t *testing.T) *pipeCell {
	c := &pipeCell{t: t, st: fs.New(fs.DefaultLimits()), now: Time(time.Hour), ends: map[chubby.SessionID]Time{},
		got: map[uint64]Verdict{}}
	leaseEnd := func(id chubby.SessionID) (Time, bool) { e, ok := c.ends[id]; return e, ok }
	c.p = NewPipeline(testPipe, NewWrites(), NewCache(0, 0), c.st.Reach, leaseEnd)
	c.p.Reset(c.clock(), 7, nil)
	return c
}

func (c *pipeCell) clock() Clock {
	return Clock{Now: c.now, WallMs: 1_700_000_000_000 + int64(c.now/1e6), Mono: c.now}
}

// take collects the pipeline's Ready.
func (c *pipeCell) take() {
	rd := c.p.Ready()
	for _, v := range rd.Verdicts {
		if _, dup := c.got[v.ID]; dup {
			c.t.Fatalf("two verdicts for change %d", v.ID)
		}
		c.got[v.ID] = v
	}
	c.woke = append(c.woke, rd.Wake...)
}

func (c *pipeCell) submit(op *fsm.Op) uint64 {
	c.id++
	c.p.Submit(c.clock(), c.id, op, 0)
	c.take()
	return c.id
}

// verdict is change id's verdict; ok false when it has none yet.
func (c *pipeCell) verdict(id uint64) (Verdict, bool) {
	v, ok := c.got[id]
	return v, ok
}

func (c *pipeCell) mustGo(id uint64) Verdict {
	c.t.Helper()
	v, ok := c.verdict(id)
	if !ok || v.Err != nil {
		c.t.Fatalf("change %d: verdict %+v (heard %v), want a go-ahead", id, v, ok)
	}
	return v
}

func (c *pipeCell) mustWait(id uint64) {
	c.t.Helper()
	if v, ok := c.verdict(id); ok {
		c.t.Fatalf("change %d: verdict %+v, want it still waiting", id, v)
	}
}

func (c *pipeCell) mustRefuse(id uint64, code chubby.ErrorCode, says string) {
	c.t.Helper()
	v, ok := c.verdict(id)
	if !ok || v.Err == nil || v.Err.Code != code || !strings.Contains(v.Err.Message, says) {
		c.t.Fatalf("change %d: verdict %+v (heard %v), want %v saying %q", id, v, ok, code, says)
	}
}

// apply applies a change let go and finishes it.
func (c *pipeCell) apply(id uint64) *fsm.Result_ {
	c.t.Helper()
	v := c.mustGo(id)
	res, _ := c.st.Apply(v.Cmd)
	c.p.Finished(c.clock(), id, false)
	c.take()
	return res
}

// run submits op, which must go at once, and applies it.
func (c *pipeCell) run(op *fsm.Op) *fsm.Result_ {
	c.t.Helper()
	res := c.apply(c.submit(op))
	if res.Err != nil {
		c.t.Fatalf("%v: %v", op, res.Err)
	}
	return res
}

func (c *pipeCell) advance(d time.Duration) {
	c.now += Time(d)
	c.p.Tick(c.clock())
	c.take()
}

// session creates a session holding a lease at this master until end.
func (c *pipeCell) session(name string, caching bool) chubby.SessionID {
	id := *c.run(&fsm.Op{CreateSession: &chubby.CreateSessionRequest{ClientName: name, Cache: &caching}}).Session
	c.ends[id] = c.now + Time(12*time.Second)
	if caching {
		c.p.Cache().Declare(id)
	}
	return id
}

func (c *pipeCell) open(s chubby.SessionID, path string) *chubby.Handle {
	return c.run(&fsm.Op{Open: &chubby.OpenRequest{Session: s, Path: path, Mode: chubby.OpenMode_READ_WRITE,
		Create: chubby.CreateMode_OPEN_OR_CREATE}}).Handle
}

// readerAndWriter makes a caching session r that caches /f and a session
// holding the handle hw of /f to write it with.
func (c *pipeCell) readerAndWriter() (r chubby.SessionID, hw *chubby.Handle) {
	r = c.session("reader", true)
	w := c.session("writer", false)
	c.open(r, "/f")
	hw = c.open(w, "/f")
	c.cache(r, "/f")
	return r, hw
}

// cache registers s as a cacher of path, as a read asking to cache does.
func (c *pipeCell) cache(s chubby.SessionID, path string) {
	c.t.Helper()
	ok, mark := c.p.Cache().RegisterRead(s, path)
	if !ok || !c.p.Cache().RegisterACL(s, path, "", mark) {
		c.t.Fatalf("session %d may not cache %s", s, path)
	}
}

func set(h *chubby.Handle, b string) *fsm.Op {
	return &fsm.Op{SetContents: &chubby.SetContentsRequest{Handle: h, Content: []byte(b)}}
}

// ack acknowledges every invalidation sent to s so far.
func (c *pipeCell) ack(s chubby.SessionID) {
	g := []*chubby.LeaseGrant{{Session: s}}
	c.p.Cache().Attach(g)
	c.p.Ack(c.clock(), 7, []chubby.SessionID{s}, []int64{g[0].GetInvalidationSeq()})
	c.take()
}

// TestPipelineUncachedChangeGoesAtOnce: a change to a node nobody caches
// waits for nothing.
func TestPipelineUncachedChangeGoesAtOnce(t *testing.T) {
	c := newPipeCell(t)
	s := c.session("a", false)
	h := c.open(s, "/f")
	id := c.submit(set(h, "x"))
	v := c.mustGo(id)
	if v.Waited != 0 || v.Cmd.TimeMs == 0 || v.Cmd.Op.SetContents == nil {
		t.Fatalf("verdict %+v: want the stamped command, no wait", v)
	}
	c.apply(id)
	if n, w := c.p.Len(); n != 0 || w != 0 {
		t.Fatalf("%d changes known, %d waiting after all finished", n, w)
	}
}

// TestPipelineWaitsForCachers: a change to a cached node waits until its
// cacher acknowledged, wakes it, and goes only in the view of the epoch
// it waited in; meanwhile the node is uncachable.
func TestPipelineWaitsForCachers(t *testing.T) {
	c := newPipeCell(t)
	r, hw := c.readerAndWriter()
	id := c.submit(set(hw, "x"))
	c.mustWait(id)
	if len(c.woke) != 1 || c.woke[0] != r {
		t.Fatalf("woke %v, want the reader %d", c.woke, r)
	}
	if ok, _ := c.p.Cache().RegisterRead(r, "/f"); ok {
		t.Fatal("the node is cachable while a change to it waits")
	}
	c.now += Time(time.Second)
	c.ack(r)
	v := c.mustGo(id)
	if !v.Invalidated || v.Waited != time.Second || !v.InView || v.View != 6 {
		t.Fatalf("verdict %+v: want invalidated after 1s, in view 6 (epoch 7)", v)
	}
	c.apply(id)
	if ok, _ := c.p.Cache().RegisterRead(r, "/f"); !ok {
		t.Fatal("the node is still uncachable after the change applied")
	}
}

// TestPipelineEndsOfWaits: each way a wait for cachers ends.
func TestPipelineEndsOfWaits(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(c *pipeCell, reader chubby.SessionID)
		code chubby.ErrorCode // 0: the change goes
		says string
		// longLease: the reader's lease outlasts InvalidateWait.
		longLease bool
	}{
		{"the cacher's lease ends", func(c *pipeCell, r chubby.SessionID) {
			at, ok := c.p.Next()
			if !ok || at != c.ends[r] {
				t.Fatalf("Next %v %v, want the reader's lease end %v", at, ok, c.ends[r])
			}
			c.advance(time.Duration(at - c.now))
		}, 0, "", false},
		{"the cacher's session ends", func(c *pipeCell, r chubby.SessionID) {
			delete(c.ends, r)
			c.p.Forget(c.clock(), r)
			c.take()
		}, 0, "", false},
		{"nobody answers within InvalidateWait", func(c *pipeCell, r chubby.SessionID) {
			// The reader's lease (an hour, see below) outlasts the bound.
			c.advance(testPipe.InvalidateWait - 1)
			if _, ok := c.verdict(c.id); ok {
				t.Fatal("refused before InvalidateWait")
			}
			c.advance(1)
		}, chubby.ErrorCode_UNAVAILABLE, "did not acknowledge", true},
		{"a new master epoch", func(c *pipeCell, r chubby.SessionID) {
			c.p.Reset(c.clock(), 8, nil)
			c.take()
		}, chubby.ErrorCode_UNAVAILABLE, "master changed", false},
		{"mastership lost", func(c *pipeCell, r chubby.SessionID) {
			c.p.Stop(fs.Errorf(chubby.ErrorCode_NOT_MASTER, "gone"))
			c.take()
		}, chubby.ErrorCode_NOT_MASTER, "gone", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newPipeCell(t)
			r, hw := c.readerAndWriter()
			if tc.longLease {
				c.ends[r] = c.now + Time(time.Hour) // a lease end is read as the change begins
			}
			id := c.submit(set(hw, "x"))
			c.mustWait(id)
			tc.end(c, r)
			if tc.code == 0 {
				c.apply(id)
				return
			}
			c.mustRefuse(id, tc.code, tc.says)
			if n, _ := c.p.Len(); n != 0 {
				t.Fatalf("%d changes still known after the refusal", n)
			}
			if _, ok := c.p.Next(); ok {
				t.Fatal("a timer is still wanted after the refusal")
			}
		})
	}
}

// TestPipelineEndSessionDrains: an EndSession waits for its session's
// commands in flight, the session's new commands are refused meanwhile,
// and it goes once they are done.
func TestPipelineEndSessionDrains(t *testing.T) {
	c := newPipeCell(t)
	s := c.session("a", false)
	h := c.open(s, "/f")
	inFlight := c.submit(set(h, "x"))
	c.mustGo(inFlight)
	end := c.submit(&fsm.Op{EndSession: &fsm.EndSession{Session: s}})
	c.mustWait(end)
	late := c.submit(set(h, "y"))
	c.mustRefuse(late, chubby.ErrorCode_SESSION_EXPIRED, "being ended")
	c.apply(inFlight)
	c.apply(end)
	// Ended, the session's commands are the state's to refuse, not the
	// pipeline's.
	c.mustGo(c.submit(set(h, "z")))
}

// TestPipelineDrainBounded: an EndSession whose session keeps a command in
// flight is refused after DrainWait, and the session's commands go again.
func TestPipelineDrainBounded(t *testing.T) {
	c := newPipeCell(t)
	s := c.session("a", false)
	h := c.open(s, "/f")
	c.mustGo(c.submit(set(h, "x")))
	end := c.submit(&fsm.Op{EndSession: &fsm.EndSession{Session: s}})
	c.advance(testPipe.DrainWait - 1)
	c.mustWait(end)
	c.advance(1)
	c.mustRefuse(end, chubby.ErrorCode_UNAVAILABLE, "still has 1 commands in flight")
	c.mustGo(c.submit(set(h, "y")))
}

// TestPipelineUncertainHold: a change whose outcome is unknown keeps its
// node uncachable and its session's EndSession waiting for UncertainHold.
func TestPipelineUncertainHold(t *testing.T) {
	c := newPipeCell(t)
	r := c.session("reader", true)
	h := c.open(r, "/f")
	c.cache(r, "/f")
	id := c.submit(set(h, "x"))
	c.ack(r)
	c.mustGo(id)
	c.p.Finished(c.clock(), id, true)
	end := c.submit(&fsm.Op{EndSession: &fsm.EndSession{Session: r}})
	if at, ok := c.p.Next(); !ok || at != c.now+Time(testPipe.UncertainHold) {
		t.Fatalf("Next %v %v, want the hold's end", at, ok)
	}
	c.advance(testPipe.UncertainHold - 1)
	c.mustWait(end)
	if ok, _ := c.p.Cache().RegisterRead(r, "/f"); ok {
		t.Fatal("cachable while a change of unknown outcome may still apply")
	}
	c.advance(1)
	c.mustGo(end)
}

// TestPipelineNewEpochSettlesUncertain: a new master epoch settled every
// command of earlier ones, so their uncertain holds go: an EndSession of
// an earlier term that never committed no longer refuses its session's
// commands, and one finished uncertain after the new epoch began is not
// held at all. (Simulator seed 7163: a replica that lost mastership and
// won it back refused a live session's Acquire as "being ended" for the
// rest of the hold.)
func TestPipelineNewEpochSettlesUncertain(t *testing.T) {
	c := newPipeCell(t)
	_, hw := c.readerAndWriter()
	s := hw.Session
	end := c.submit(&fsm.Op{EndSession: &fsm.EndSession{Session: s}})
	c.mustGo(end)
	late := c.submit(set(hw, "x"))
	c.mustRefuse(late, chubby.ErrorCode_SESSION_EXPIRED, "being ended")
	c.p.Finished(c.clock(), end, true) // the master lost its lease: unknown
	c.mustRefuse(c.submit(set(hw, "y")), chubby.ErrorCode_SESSION_EXPIRED, "being ended")

	other := c.submit(&fsm.Op{EndSession: &fsm.EndSession{Session: c.session("other", false)}})
	c.mustGo(other)
	c.p.Stop(fs.Errorf(chubby.ErrorCode_NOT_MASTER, "lost"))
	c.p.Reset(c.clock(), 9, nil) // a later term of this replica
	c.mustGo(c.submit(set(hw, "z")))
	if _, held := c.p.Next(); held {
		t.Fatal("an uncertain hold of epoch 7 outlived epoch 9's start")
	}
	c.p.Finished(c.clock(), other, true)
	if _, held := c.p.Next(); held {
		t.Fatal("a change of epoch 7 finished uncertain in epoch 9 is held")
	}
}

// TestPipelineCancel: a change given up in any stage holds nothing after.
func TestPipelineCancel(t *testing.T) {
	for _, stage := range []string{"draining", "invalidating", "granted"} {
		t.Run(stage, func(t *testing.T) {
			c := newPipeCell(t)
			r, hw := c.readerAndWriter()
			var id uint64
			switch stage {
			case "draining":
				x := c.submit(set(hw, "x")) // stays in flight
				c.ack(r)
				c.mustGo(x)
				id = c.submit(&fsm.Op{EndSession: &fsm.EndSession{Session: hw.Session}})
			case "invalidating":
				id = c.submit(set(hw, "x"))
			case "granted":
				id = c.submit(set(hw, "x"))
				c.ack(r)
				c.mustGo(id)
			}
			err := c.p.Cancel(c.clock(), id, errGone)
			if err == nil || err.Code != chubby.ErrorCode_UNAVAILABLE || !strings.Contains(err.Message, "gone") {
				t.Fatalf("Cancel: %v", err)
			}
			if err := c.p.Cancel(c.clock(), id, errGone); err != nil {
				t.Fatalf("a second Cancel: %v", err)
			}
			c.take()
			if stage != "granted" {
				c.mustWait(id) // no verdict: the caller has its error
			}
			if stage == "draining" {
				c.mustGo(c.submit(set(hw, "y"))) // no longer ending
				return
			}
			if n, _ := c.p.Len(); n != 0 {
				t.Fatalf("%d changes known", n)
			}
			c.ack(r)
			c.cache(r, "/f")
		})
	}
}

var errGone = stringError("the caller is gone")

type stringError string

func (e stringError) Error() string { return string(e) }
