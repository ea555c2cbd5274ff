package sim

import (
	"fmt"
	"time"

	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// The workload: a few files written, read and compare-and-swapped, a few
// exclusive locks taken and released, a few names raced for by CreateFile.
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
)

var opNames = [...]string{"create-session", "setup-create", "open", "read", "write", "cas", "create", "acquire", "release"}

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
	call     int64
	attempts int
	in       modelInput
}

// client is one sequential client with one session. It sends each
// operation to the replica it believes is the primary, follows NOT_MASTER
// hints, and retries on timeouts — with the same (session, seq) for
// commands, so a retry is applied at most once.
type client struct {
	w       *world
	id      int
	session int64
	seq     int64
	files   [nFiles]*chubby.Handle
	locks   [nLocks]*chubby.Handle
	holding [nLocks]*chubby.Sequencer // believed held, with its sequencer
	unsure  [nLocks]bool              // an ambiguous acquire: release to be sure
	lastGen [nFiles]int64
	target  uint64
	cur     *op
	opSeq   uint64
	values  int

	setup    []*op
	inSetup  bool
	stopping bool
	finished bool

	pendingAmbiguous []int // history indexes whose return waits for a later success
}

func newClient(w *world, id int) *client {
	return &client{w: w, id: id, target: uint64(1 + w.intn(len(w.replicas)))}
}

func (c *client) describe() string {
	if c.cur == nil {
		return fmt.Sprintf("c%d idle", c.id)
	}
	return fmt.Sprintf("c%d %v#%d attempts=%d target=r%d since %v", c.id, c.cur.kind, c.cur.id, c.cur.attempts, c.target, c.cur.call)
}

// startSetup creates the session and opens the handles; client 0 creates
// the files first and then lets the others start.
func (c *client) startSetup() {
	c.inSetup = true
	c.setup = append(c.setup, &op{kind: opCreateSession})
	if c.id == 0 {
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
	c.nextSetup()
}

func (c *client) nextSetup() {
	if len(c.setup) == 0 {
		c.inSetup = false
		c.w.tracef("c%d setup done: session %d", c.id, c.session)
		c.think()
		return
	}
	o := c.setup[0]
	c.setup = c.setup[1:]
	switch o.kind {
	case opCreateSession:
		o.cmd = &fsm.Command{Op: &fsm.Op{CreateSession: &chubby.CreateSessionRequest{ClientName: fmt.Sprintf("c%d", c.id)}}}
	case opSetupCreate:
		o.cmd = c.command(&fsm.Op{CreateFile: &chubby.CreateFileRequest{Session: c.session, Path: o.path}})
	case opOpen:
		mode := chubby.OpenMode_READ_WRITE
		if o.lock {
			mode = chubby.OpenMode_READ
		}
		o.cmd = c.command(&fsm.Op{Open: &chubby.OpenRequest{Session: c.session, Path: o.path, Mode: mode, Create: chubby.CreateMode_OPEN_EXISTING}})
	}
	c.begin(o)
}

// command wraps an operation in a sequenced command of the session.
func (c *client) command(o *fsm.Op) *fsm.Command {
	c.seq++
	s, q := c.session, c.seq
	return &fsm.Command{Session: &s, Seq: &q, Op: o}
}

func (c *client) stopAfterCurrent() {
	c.stopping = true
	if c.cur == nil && !c.inSetup && !c.finished {
		c.finish()
	}
}

func (c *client) finish() {
	c.finished = true
	c.w.tracef("c%d finished", c.id)
	c.w.clientFinished()
}

func (c *client) think() {
	if c.stopping {
		c.finish()
		return
	}
	w := c.w
	w.after(w.between(0, 20*ms), func() {
		if c.cur == nil && !c.finished {
			if c.stopping {
				c.finish()
				return
			}
			c.nextOp()
		}
	})
}

func (c *client) nextOp() {
	w := c.w
	o := &op{}
	switch k := w.intn(100); {
	case k < 30:
		i := w.intn(nFiles)
		*o = op{kind: opRead, idx: i, handle: c.files[i]}
		o.in = modelInput{kind: opRead, key: filePath(i)}
	case k < 50:
		i := w.intn(nFiles)
		v := c.newValue()
		*o = op{kind: opWrite, idx: i}
		o.cmd = c.command(&fsm.Op{SetContents: &chubby.SetContentsRequest{Handle: c.files[i], Content: []byte(v)}})
		o.in = modelInput{kind: opWrite, key: filePath(i), value: v}
	case k < 65:
		i := w.intn(nFiles)
		v := c.newValue()
		exp := c.lastGen[i] + int64(w.intn(3)) - 1
		*o = op{kind: opCAS, idx: i}
		o.cmd = c.command(&fsm.Op{SetContents: &chubby.SetContentsRequest{Handle: c.files[i], Content: []byte(v), ExpectedGeneration: &exp}})
		o.in = modelInput{kind: opCAS, key: filePath(i), value: v, expected: exp}
	case k < 90:
		i := w.intn(nLocks)
		if c.holding[i] != nil || c.unsure[i] {
			*o = op{kind: opRelease, idx: i}
			o.cmd = c.command(&fsm.Op{Release: &chubby.HandleRequest{Handle: c.locks[i]}})
			// The belief ends when the release is sent.
			c.holding[i] = nil
			c.unsure[i] = false
		} else {
			*o = op{kind: opAcquire, idx: i}
			o.cmd = c.command(&fsm.Op{Acquire: &fsm.Acquire{Handle: c.locks[i], Mode: chubby.LockMode_EXCLUSIVE, Wait: false}})
		}
		o.in = modelInput{kind: o.kind, key: lockPath(i), client: c.id}
	default:
		i := w.intn(nCreates)
		v := c.newValue()
		*o = op{kind: opCreate, idx: i}
		o.cmd = c.command(&fsm.Op{CreateFile: &chubby.CreateFileRequest{Session: c.session, Path: createPath(i), Content: []byte(v)}})
		o.in = modelInput{kind: opCreate, key: createPath(i)}
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
	c.cur = o
	c.w.tracef("c%d begin %v#%d %s", c.id, o.kind, o.id, o.in.String())
	c.attempt()
}

// attempt sends the current operation once more.
func (c *client) attempt() {
	w := c.w
	o := c.cur
	o.attempts++
	att := o.attempts
	target := c.target
	q := request{c: c, opID: o.id, attempt: att, handle: o.handle, cmd: o.cmd}
	w.net.sendClient(func() {
		if r := w.replicas[target-1]; r.up {
			r.input(func() { r.onRequest(q) })
		}
	})
	w.after(w.between(100*ms, 200*ms), func() {
		if c.cur == o && o.attempts == att {
			c.target = c.target%uint64(len(w.replicas)) + 1
			c.attempt()
		}
	})
}

func (c *client) onReply(rep reply) {
	w := c.w
	o := c.cur
	if o == nil || rep.opID != o.id {
		return
	}
	switch rep.kind {
	case replyNotPrimary, replyBusy:
		if rep.attempt != o.attempts {
			return // an older attempt's refusal; a newer one is out
		}
		if rep.kind == replyNotPrimary {
			c.target = rep.hint
			w.after(w.between(0, 2*ms), func() {
				if c.cur == o && o.attempts == rep.attempt {
					c.attempt()
				}
			})
			return
		}
		w.after(w.between(5*ms, 30*ms), func() {
			if c.cur == o && o.attempts == rep.attempt {
				c.target = c.target%uint64(len(w.replicas)) + 1
				c.attempt()
			}
		})
		return
	}
	c.target = rep.from
	c.cur = nil
	c.complete(o, rep)
}

func (c *client) complete(o *op, rep reply) {
	w := c.w
	w.tracef("c%d done %v#%d after %d attempts: %s", c.id, o.kind, o.id, o.attempts, describeReply(rep))
	switch o.kind {
	case opCreateSession:
		if rep.res.Err != nil {
			w.fail("c%d: CreateSession failed: %v", c.id, rep.res.Err)
			return
		}
		c.session = *rep.res.Session
	case opSetupCreate:
		if e := rep.res.Err; e != nil && e.Code != chubby.ErrorCode_EXISTS {
			w.fail("c%d: setup CreateFile %s: %v", c.id, o.path, e)
			return
		}
		if c.id == 0 && len(c.setup) > 0 && c.setup[0].kind == opOpen {
			for _, other := range w.clients[1:] {
				other.startSetup()
			}
		}
	case opOpen:
		if rep.res.Err != nil {
			w.fail("c%d: setup Open %s: %v", c.id, o.path, rep.res.Err)
			return
		}
		if o.lock {
			c.locks[o.idx] = rep.res.Handle
		} else {
			c.files[o.idx] = rep.res.Handle
			c.lastGen[o.idx] = 1 // a new file is at content generation 1
		}
	default:
		c.record(o, rep)
	}
	if w.done {
		return
	}
	if c.inSetup {
		c.nextSetup()
		return
	}
	c.think()
}

// record adds a workload operation to the history and updates the
// client's beliefs.
func (c *client) record(o *op, rep reply) {
	w := c.w
	out := modelOutput{ok: true}
	if o.kind == opRead {
		if rep.readErr != nil {
			out.ok, out.code = false, fs.Code(rep.readErr)
		} else {
			out.value, out.gen = string(rep.content), rep.stat.ContentGeneration
		}
	} else if e := rep.res.Err; e != nil {
		out.ok, out.code = false, e.Code
		// The fs saves only successful results for exactly-once: when more
		// than one attempt was sent, another one may still be applied after
		// this refusal and succeed. Such an operation's outcome is unknown
		// until the session's next successful command.
		out.ambiguous = o.attempts > 1 && !w.opt.StrictRefusals
	} else {
		if rep.res.Stat != nil {
			out.gen = rep.res.Stat.ContentGeneration
		}
		if rep.res.Sequencer != nil {
			out.gen = rep.res.Sequencer.LockGeneration
		}
	}
	switch o.kind {
	case opRead, opWrite, opCAS:
		if out.ok {
			c.lastGen[o.idx] = out.gen
		}
	case opAcquire:
		switch {
		case out.ok:
			c.holding[o.idx] = rep.res.Sequencer
			w.check.locks()
		case out.ambiguous:
			c.unsure[o.idx] = true
		}
	}
	if w.killedAt > 0 && w.res.Failover == 0 && o.call >= w.killedAt {
		w.res.Failover = time.Duration(w.now - w.killedAt)
	}
	ret := w.now
	if out.ambiguous {
		ret = farFuture
		w.res.Ambiguous++
	}
	idx := w.check.addOp(c.id, o.in, o.call, out, ret)
	if out.ambiguous {
		c.pendingAmbiguous = append(c.pendingAmbiguous, idx)
	} else if o.cmd != nil && out.ok {
		// This success moved the session's sequence past every earlier
		// command: their stray retries are stale from now on.
		for _, i := range c.pendingAmbiguous {
			w.check.hist[i].Return = w.now
		}
		c.pendingAmbiguous = c.pendingAmbiguous[:0]
	}
	w.res.Ops++
}

func describeReply(rep reply) string {
	switch {
	case rep.res != nil && rep.res.Err != nil:
		return fmt.Sprintf("from r%d: %v", rep.from, rep.res.Err.Code)
	case rep.res != nil:
		return fmt.Sprintf("from r%d: ok", rep.from)
	case rep.readErr != nil:
		return fmt.Sprintf("from r%d: read %v", rep.from, rep.readErr)
	default:
		return fmt.Sprintf("from r%d: read %q gen %d", rep.from, rep.content, rep.stat.ContentGeneration)
	}
}
