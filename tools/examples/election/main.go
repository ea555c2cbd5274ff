// Command election elects a master with a Chubby lock, the first of the two
// classic uses in the Chubby paper (Burrows, OSDI 2006) that tools/examples
// shows; the second, process monitoring, is tools/examples/monitor.
//
// Every candidate opens the same file, asking for contents-modified events,
// and waits for its exclusive lock. The one that gets it is the leader and
// writes its address into the file. The others read the file to learn the
// leader's address, and learn every later one from the event its write
// sends them: no polling.
//
// When the leader dies without releasing (crash, kill -9, cut off), its
// session ends at the master when its lease runs out; the lock then stays
// unavailable for the leader's lock-delay, so that its last messages land
// before anyone else leads; then the first waiting candidate gets the lock
// and writes its address, and every follower hears of it. The takeover
// takes at most about lease + lock-delay (plus the KeepAlive margin by
// which the master renews a lease early). Between the old leader's death
// and the new one's write the file still names the old leader: the
// address is current only while the file's lock is held (Stat.Lock), which
// is why every observation below says whether it was.
//
// A leader that loses its session (jeopardy: its lease ran out with no
// renewal) must stop acting as leader at once: the lock may be someone
// else's soon. This program then exits with status 1.
//
// Usage:
//
//	election --cell 127.0.0.1:7000 --path /election/db --address 10.0.0.7:5432 [--lock-delay 5s]
//
// It prints one line each time it learns who leads, until Ctrl-C:
//
//	leader 10.0.0.8:5432 read free     (joined; the last leader is gone)
//	leader 10.0.0.7:5432 self won held (this one won)
//	leader 10.0.0.9:5432 event held    (a later leader wrote its address)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"path"
	"syscall"
	"time"

	"github.com/cloudwego/kitex/pkg/klog"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// How says how a candidate learned who leads.
type How string

const (
	Won   How = "won"   // it got the lock and wrote its own address
	Read  How = "read"  // it read the file when it joined
	Event How = "event" // a contents-modified event told it the file changed
)

// Observation is one thing a candidate learned about the leadership.
type Observation struct {
	Leader string // the address in the file
	Self   bool   // this candidate leads
	How    How
	Held   bool // the file's lock was held when it was read
	At     time.Time
}

// Candidate campaigns for leadership of the election file Path, on one
// session.
type Candidate struct {
	Session *client.Session
	Path    string // the election file; its parent directory must exist
	Address string // what the candidate writes when it wins
	// LockDelay is how long the lock stays unavailable after this candidate
	// dies holding it (see client.LockOptions: 0 the cell's default of 15 s,
	// client.NoLockDelay none, at most 60 s).
	LockDelay time.Duration
	// Observe is called, from Run's goroutine, for everything the
	// candidate learns.
	Observe func(Observation)
}

// Run campaigns until ctx ends (nil: a clean stop; a leader empties the
// file and releases its lock, so the next candidate leads at once) or the
// session is lost (an error: stop acting as leader).
func (c *Candidate) Run(ctx context.Context) error {
	s := c.Session
	h, err := s.Open(ctx, c.Path, client.OpenOptions{
		Mode:      chubby.OpenMode_READ_WRITE,
		Create:    chubby.CreateMode_OPEN_OR_CREATE,
		EventMask: chubby.EVENT_MASK_FILE_CONTENTS_MODIFIED,
	})
	if err != nil {
		return fmt.Errorf("open %s: %w", c.Path, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = h.Close(cctx) // releases the lock if held
	}()

	// Wait for the lock in the background while following the leader.
	actx, stopAcquire := context.WithCancel(ctx)
	defer stopAcquire()
	type grant struct {
		seq *chubby.Sequencer
		err error
	}
	won := make(chan grant, 1)
	go func() {
		seq, err := acquire(actx, h, client.LockOptions{LockDelay: c.LockDelay})
		won <- grant{seq, err}
	}()

	if err := c.read(ctx, h, Read); err != nil {
		return err
	}
	leading := false
	events, sessionEvents := h.Events(), s.Events()
	for {
		select {
		case <-ctx.Done():
			if leading {
				// Step down cleanly: empty the file so nobody takes our
				// address for current; closing the handle releases the lock.
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				_, _ = h.SetContents(cctx, nil)
				cancel()
			}
			return nil
		case <-s.Done():
			return fmt.Errorf("session lost: %w", s.Err())
		case ev, ok := <-sessionEvents:
			if !ok {
				sessionEvents = nil // s.Done says why
				continue
			}
			if leading && (ev.Kind == client.EventJeopardy || ev.Kind == client.EventExpired) {
				return fmt.Errorf("leader's session in %v: stop leading", ev.Kind)
			}
		case g := <-won:
			won = nil
			if g.err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("acquire %s: %w", c.Path, g.err)
			}
			if _, err := h.SetContents(ctx, []byte(c.Address)); err != nil {
				return fmt.Errorf("write %s: %w", c.Path, err)
			}
			leading = true
			c.observe(Observation{Leader: c.Address, Self: true, How: Won, Held: true, At: time.Now()})
		case ev, ok := <-events:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("events of %s ended: %w", c.Path, errors.Join(s.Err(), errors.New("handle closed")))
			}
			if ev.Kind != chubby.EventKind_FILE_CONTENTS_MODIFIED && ev.Kind != chubby.EventKind_EVENTS_LOST || leading {
				continue
			}
			if err := c.read(ctx, h, Event); err != nil {
				return err
			}
		}
	}
}

// read reads the leader's address from the file and reports it, if any.
func (c *Candidate) read(ctx context.Context, h *client.Handle, how How) error {
	data, st, err := h.GetContentsAndStat(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("read %s: %w", c.Path, err)
	}
	if len(data) == 0 {
		return nil // nobody has led yet
	}
	held := st.GetLock().IsSetMode()
	c.observe(Observation{Leader: string(data), Self: string(data) == c.Address && held, How: how, Held: held, At: time.Now()})
	return nil
}

func (c *Candidate) observe(o Observation) {
	if c.Observe != nil {
		c.Observe(o)
	}
}

// acquire waits for the exclusive lock for as long as it takes, in turns of
// the longest wait one Acquire may ask for.
func acquire(ctx context.Context, h *client.Handle, opts client.LockOptions) (*chubby.Sequencer, error) {
	for {
		seq, err := h.Acquire(ctx, chubby.LockMode_EXCLUSIVE, time.Duration(chubby.MAX_ACQUIRE_WAIT_MS)*time.Millisecond, opts)
		if err == nil || !client.IsCode(err, chubby.ErrorCode_TIMED_OUT) {
			return seq, err
		}
	}
}

func main() {
	klog.SetOutput(io.Discard)
	cell := flag.String("cell", "", "the cell's replica addresses, comma separated (default: $CHUBBY_CELL, else "+client.DefaultAddr+")")
	file := flag.String("path", "/election/leader", "the election file (its parent directories are created)")
	addr := flag.String("address", "", "the address this candidate announces when it leads (required)")
	delay := flag.Duration("lock-delay", 5*time.Second, "how long the lock stays unavailable after this candidate dies leading (0..60s)")
	flag.Parse()
	if *addr == "" {
		fmt.Fprintln(os.Stderr, "election: --address is required")
		os.Exit(2)
	}
	if err := campaign(*cell, *file, *addr, *delay); err != nil {
		log.Fatalf("election: %v", err)
	}
}

func campaign(cell, file, addr string, delay time.Duration) error {
	if err := client.ValidatePath(file); err != nil {
		return fmt.Errorf("--path: %w", err)
	}
	if delay < 0 || delay > time.Duration(chubby.MAX_LOCK_DELAY_MS)*time.Millisecond {
		return fmt.Errorf("--lock-delay %v outside 0..60s", delay)
	}
	if delay == 0 {
		delay = client.NoLockDelay
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := client.Config{}
	if cell != "" {
		addrs, err := client.ParseAddrs(cell)
		if err != nil {
			return fmt.Errorf("--cell: %w", err)
		}
		cfg.Addrs = addrs
	}
	c, err := client.Connect(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer c.Close()
	s, err := c.NewSession(ctx)
	if err != nil {
		return fmt.Errorf("new session: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = s.Close(cctx) // releases the lock at once; else it ends with the lease
	}()
	if dir := path.Dir(file); dir != "/" {
		if _, err := s.Mkdir(ctx, dir, client.MkdirOptions{Parents: true}); err != nil && !client.IsCode(err, chubby.ErrorCode_EXISTS) {
			return fmt.Errorf("mkdir %s: %w", dir, err)
		}
	}
	cand := &Candidate{Session: s, Path: file, Address: addr, LockDelay: delay, Observe: func(o Observation) {
		who, state := "", "held"
		if o.Self {
			who = " self"
		}
		if !o.Held {
			state = "free"
		}
		fmt.Printf("leader %s%s %s %s\n", o.Leader, who, o.How, state)
	}}
	return cand.Run(ctx)
}
