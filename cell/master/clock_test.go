package master

import (
	"testing"

	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// clockCell is an fs state driven by a master's Writes on a fake clock:
// mono is the monotonic clock (ms), wall the wall clock as a function of
// it (which a test makes jump).
type clockCell struct {
	t    *testing.T
	st   *fs.State
	w    *Writes
	mono int64
	wall func(mono int64) int64
	// clockAt is when the state clock was last moved (mono, ms): a new
	// master anchors there, as the cell's machine records it.
	clockAt int64
}

func (c *clockCell) apply(op *fsm.Op) *fsm.Result_ {
	c.t.Helper()
	wr, _ := c.w.Begin(0, c.wall(c.mono), c.mono*1e6, 0)
	before := c.st.Now()
	res, _ := c.st.Apply(&fsm.Command{TimeMs: wr.TimeMs, Op: op})
	if c.st.Now() != before {
		c.clockAt = c.mono
	}
	c.w.Done(wr)
	return res
}

func (c *clockCell) ok(op *fsm.Op) *fsm.Result_ {
	c.t.Helper()
	res := c.apply(op)
	if res.Err != nil {
		c.t.Fatalf("%v: %v", op, res.Err)
	}
	return res
}

func (c *clockCell) handle(sess chubby.SessionID, p string) *chubby.Handle {
	c.t.Helper()
	return c.ok(&fsm.Op{Open: &chubby.OpenRequest{Session: sess, Path: p, Mode: chubby.OpenMode_READ_WRITE, Create: chubby.CreateMode_OPEN_OR_CREATE}}).Handle
}

// TestLockDelayHoldsOnWallJumps: a lock whose holder's session expired
// stays unavailable for its whole lock-delay, measured on the master's
// monotonic clock, when the wall clock jumps an hour forward or back
// during it, and when a master whose wall clock is an hour ahead takes
// over. A jump back never makes command times go back.
func TestLockDelayHoldsOnWallJumps(t *testing.T) {
	const delay = 10_000 // ms
	const step = 100     // ms between a contender's tries
	base := int64(1_700_000_000_000)
	for _, tc := range []struct {
		name     string
		jump     int64 // added to the wall clock from 1 s into the delay
		failover bool  // a new master (its wall clock jumped) takes over there
	}{
		{"no jump", 0, false},
		{"wall clock 1 h forward", hour, false},
		{"wall clock 1 h back", -hour, false},
		{"failover to a master 1 h ahead", hour, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var endAt int64 // mono when the holder's session ended
			c := &clockCell{t: t, st: fs.New(fs.DefaultLimits()), w: NewWrites()}
			c.wall = func(mono int64) int64 {
				if endAt != 0 && mono >= endAt+1000 {
					return base + mono + tc.jump
				}
				return base + mono
			}
			holder := *c.ok(&fsm.Op{CreateSession: &chubby.CreateSessionRequest{ClientName: "holder"}}).Session
			other := *c.ok(&fsm.Op{CreateSession: &chubby.CreateSessionRequest{ClientName: "other"}}).Session
			hh, oh := c.handle(holder, "/l"), c.handle(other, "/l")
			c.mono += step
			c.ok(&fsm.Op{Acquire: &fsm.Acquire{Handle: hh, Mode: chubby.LockMode_EXCLUSIVE, LockDelayMs: delay}})
			c.mono += step
			endAt = c.mono
			c.ok(&fsm.Op{EndSession: &fsm.EndSession{Session: holder, Expired: true}})
			lastTime := c.st.Now()
			for {
				c.mono += step
				if tc.failover && c.mono == endAt+1000 {
					// The new master applied every command when it was
					// committed; its own table starts from the state.
					c.w = NewWrites()
					c.w.Anchor(c.st.Now(), c.clockAt*1e6)
				}
				res := c.apply(&fsm.Op{Acquire: &fsm.Acquire{Handle: oh, Mode: chubby.LockMode_EXCLUSIVE, LockDelayMs: delay}})
				if now := c.st.Now(); now < lastTime {
					t.Fatalf("the state clock went back from %d to %d", lastTime, now)
				} else {
					lastTime = now
				}
				if res.Err == nil {
					break
				}
				if res.Err.Code != chubby.ErrorCode_LOCK_HELD {
					t.Fatal(res.Err)
				}
				if c.mono > endAt+2*hour {
					t.Fatal("never granted")
				}
			}
			if got := c.mono - endAt; got < delay {
				t.Fatalf("granted %d ms after the holder expired, before its %d ms lock-delay", got, delay)
			} else if tc.jump >= 0 && got > delay+step {
				t.Fatalf("granted %d ms after the holder expired, want about %d", got, delay)
			} else {
				t.Logf("granted %d ms after the holder expired (lock-delay %d ms)", got, delay)
			}
		})
	}
}
