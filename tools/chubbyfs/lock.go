package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// EnvSequencer is the variable through which lock hands COMMAND the lock's
// sequencer (its printable form).
const EnvSequencer = "CHUBBY_SEQUENCER"

const (
	// lockSetupTimeout bounds connecting, creating the session and opening
	// the file before the wait for the lock starts.
	lockSetupTimeout = 30 * time.Second
	// defaultLostGrace is how long COMMAND has, by default, to exit after
	// the lock is lost and it was signalled, before it is killed
	// (--lost-grace).
	defaultLostGrace = 10 * time.Second
	// lockCheckTimeout bounds the sequencer check made when the lock may
	// have been lost unseen (events lost, a new master).
	lockCheckTimeout = 10 * time.Second
	// Exit statuses when COMMAND cannot be started, as env(1) and shells use.
	exitCannotExec = 126
	exitNotFound   = 127
)

type lockFlags struct {
	shared    bool
	wait      time.Duration
	lockDelay time.Duration
	lost      lostFlags
}

// lostFlags say what lock and election campaign do to COMMAND when the
// lock is lost while it runs: the signal to send (--lost-signal) and how
// long COMMAND has to exit before SIGKILL (--lost-grace).
type lostFlags struct {
	signal string
	grace  time.Duration
}

// lostSignals are the signals --lost-signal takes, by name.
var lostSignals = map[string]syscall.Signal{
	"TERM": syscall.SIGTERM, "INT": syscall.SIGINT, "HUP": syscall.SIGHUP, "QUIT": syscall.SIGQUIT,
	"USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "KILL": syscall.SIGKILL,
}

// addLostFlags defines --lost-signal and --lost-grace on cmd.
func addLostFlags(cmd *cobra.Command, f *lostFlags) {
	cmd.Flags().StringVar(&f.signal, "lost-signal", "TERM",
		"the signal COMMAND gets when the lock is lost while it runs: TERM, INT, HUP, QUIT, USR1, USR2 or KILL")
	cmd.Flags().DurationVar(&f.grace, "lost-grace", defaultLostGrace,
		"after --lost-signal, how long COMMAND has to exit before it gets SIGKILL (0: at once)")
}

// lostPolicy is what is done to COMMAND when the lock is lost.
type lostPolicy struct {
	signal syscall.Signal
	name   string // as given, for messages: "SIGTERM"
	grace  time.Duration
}

// policy checks the flags and returns what they say.
func (f lostFlags) policy(verb string) (lostPolicy, error) {
	name := strings.TrimPrefix(strings.ToUpper(f.signal), "SIG")
	sig, ok := lostSignals[name]
	if !ok {
		return lostPolicy{}, usagef("%s: --lost-signal %q is not one of TERM, INT, HUP, QUIT, USR1, USR2, KILL", verb, f.signal)
	}
	if f.grace < 0 {
		return lostPolicy{}, usagef("%s: --lost-grace must not be negative", verb)
	}
	return lostPolicy{signal: sig, name: "SIG" + name, grace: f.grace}, nil
}

// lostHelp is the part of lock's and election campaign's help on a lost
// lock.
const lostHelp = `The lock is lost while COMMAND runs when the session goes into jeopardy
(its lease ran out without a renewal: the master may have ended it) or
ends, or when the file is deleted (rm -r of it or a parent: the handle
becomes invalid); after events were lost or a master failover the lock is
checked with the cell (its sequencer). Then COMMAND gets --lost-signal
(SIGTERM by default) and, if it has not exited --lost-grace later (10s),
SIGKILL; the loss is reported and the exit status is 1, whatever
COMMAND's.`

func (a *app) lockCommand() *cobra.Command {
	var f lockFlags
	cmd := &cobra.Command{
		Use:   "lock [--shared] [--timeout D] [--lock-delay D] [--lost-signal SIG] [--lost-grace D] PATH -- COMMAND [ARG...]",
		Short: "hold a lock while a command runs (like flock)",
		Long: `lock opens the file PATH (creating it if missing; its parent directory must
exist), acquires its lock — exclusive, or shared with --shared — and runs
COMMAND while holding it, with standard input, output and error passed
through and the lock's sequencer in the environment variable
CHUBBY_SEQUENCER (chubby-seq:v1:<E|S>:<generation>:<instance>:<path>), which
COMMAND can hand to the servers it talks to so they can check it
(chubbyfs sequencer check). When COMMAND ends, the lock is released and
lock exits with COMMAND's exit status (128+N if a signal N killed it).

Flags go before PATH. Here --timeout bounds the wait for the lock (exit 1
when it passes); the global whole-command timeout does not apply, since
COMMAND runs as long as it needs. SIGINT and SIGTERM are passed on to
COMMAND. If COMMAND cannot be started, lock exits 127 (not found) or 126.

` + lostHelp,
		Example: `  chubbyfs lock /jobs/nightly -- ./nightly.sh
  chubbyfs lock --shared --timeout 30s /data/ready -- sh -c 'echo "$CHUBBY_SEQUENCER"'`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, argv, err := lockArgs(cmd, "lock", args, f.wait, f.lockDelay)
			if err != nil {
				return err
			}
			lost, err := f.lost.policy("lock")
			if err != nil {
				return err
			}
			mode := chubby.LockMode_EXCLUSIVE
			if f.shared {
				mode = chubby.LockMode_SHARED
			}
			return a.runLocked(cmd.Context(), p, lockedRun{
				verb: "lock", waitingFor: "the lock", notWon: "not granted", wait: f.wait, lost: lost,
				take: func(setupCtx, waitCtx context.Context, s *client.Session) (*chubby.Sequencer, func(context.Context) error, error) {
					return takeLock(setupCtx, waitCtx, s, p, mode, f)
				},
			}, argv)
		},
	}
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().BoolVar(&f.shared, "shared", false, "take a shared (reader) lock (default: exclusive)")
	cmd.Flags().DurationVar(&f.wait, "timeout", 0, "give up waiting for the lock after this long (default 0: wait as long as it takes)")
	cmd.Flags().DurationVar(&f.lockDelay, "lock-delay", time.Duration(chubby.DEFAULT_LOCK_DELAY_MS)*time.Millisecond,
		"if this session dies holding the lock, keep the lock from others this long (0: none; at most 60s)")
	addLostFlags(cmd, &f.lost)
	return cmd
}

// lockArgs checks the arguments and flags that lock and election campaign
// share: PATH -- COMMAND [ARG...] (flags stop at PATH, so a "--" after it
// is still in args), --timeout and --lock-delay.
func lockArgs(cmd *cobra.Command, verb string, args []string, wait, lockDelay time.Duration) (p string, argv []string, err error) {
	if len(args) >= 2 && args[1] == "--" {
		args = append(args[:1:1], args[2:]...)
	}
	if len(args) < 2 {
		return "", nil, usagef("%s wants PATH -- COMMAND [ARG...]", verb)
	}
	if p, err = pathArg(cmd, args[:1]); err != nil {
		return "", nil, err
	}
	if wait < 0 {
		return "", nil, usagef("%s: --timeout must not be negative", verb)
	}
	if maxDelay := time.Duration(chubby.MAX_LOCK_DELAY_MS) * time.Millisecond; lockDelay < 0 || lockDelay > maxDelay {
		return "", nil, usagef("%s: --lock-delay must be in 0..%v", verb, maxDelay)
	}
	return p, args[1:], nil
}

// lockedRun is how lock and election campaign hold a lock around a
// command: they differ in the words of their messages and in how they
// take the lock and let it go.
type lockedRun struct {
	verb       string        // the command, in messages: "lock", "election campaign"
	waitingFor string        // "the lock", "leadership"
	notWon     string        // "not granted", "not elected"
	wait       time.Duration // 0: as long as it takes; only for messages here
	lost       lostPolicy    // what COMMAND gets when the lock is lost
	// take gets the lock for s: it opens under setupCtx and waits under
	// waitCtx, and returns the lock's sequencer and how to let it go.
	take func(setupCtx, waitCtx context.Context, s *client.Session) (*chubby.Sequencer, func(context.Context) error, error)
}

// runLocked takes the lock on p, runs argv while holding it, and lets
// it go.
func (a *app) runLocked(ctx context.Context, p string, r lockedRun, argv []string) error {
	// Until COMMAND starts, SIGINT and SIGTERM abandon the attempt cleanly
	// (the session is closed, so a pending Acquire is dropped).
	waitCtx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()

	c, err := a.connect(waitCtx)
	if err != nil {
		return err
	}
	defer c.Close()
	setupCtx, cancel := context.WithTimeout(waitCtx, lockSetupTimeout)
	defer cancel()
	s, err := c.NewSession(setupCtx)
	if err != nil {
		return refused(r.verb, p, err)
	}
	defer func() {
		cctx, cancel := releaseContext(ctx)
		defer cancel()
		_ = s.Close(cctx) // releases the lock if letting it go failed
	}()
	seq, release, err := r.take(setupCtx, waitCtx, s)
	if err != nil {
		if waitCtx.Err() != nil && ctx.Err() == nil {
			return &exitError{code: exitRefused, msg: fmt.Sprintf("%s %s: interrupted while waiting for %s", r.verb, p, r.waitingFor)}
		}
		if client.IsCode(err, chubby.ErrorCode_TIMED_OUT) {
			return &exitError{code: exitRefused, msg: fmt.Sprintf("%s %s: %s within %v (--timeout)", r.verb, p, r.notWon, r.wait)}
		}
		return refused(r.verb, p, err)
	}
	// A handle of its own tells of the file's deletion (HANDLE_INVALID):
	// the lock goes with the node, whoever holds it.
	watch, err := s.Open(setupCtx, p, client.OpenOptions{EventMask: chubby.EVENT_MASK_HANDLE_INVALID})
	switch {
	case err != nil && waitCtx.Err() != nil && ctx.Err() == nil:
		return &exitError{code: exitRefused, msg: fmt.Sprintf("%s %s: interrupted before COMMAND started", r.verb, p)}
	case err == nil && watch.Stat().GetInstance() != seq.GetInstance():
		err = errors.New("the file was deleted and made again since the lock was taken")
	}
	if err != nil {
		return &exitError{code: exitRefused, msg: fmt.Sprintf("%s %s: lock lost before COMMAND started: %s", r.verb, p, client.Describe(err))}
	}
	// From here on SIGINT and SIGTERM go to COMMAND; the forwarding channel
	// is in place before the waiting phase's handler goes.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	stopSignals()

	status, lost, err := a.runCommand(ctx, s, seq, watch, argv, sigs, r.lost)
	rctx, rcancel := releaseContext(ctx)
	defer rcancel()
	// Let go only from a safe session: in jeopardy a call would wait for
	// the master (up to the release timeout), and the lock ends with the
	// session anyway. A lost lock has nothing to let go.
	if !lost && s.Err() == nil && s.State() == client.StateSafe {
		if rerr := release(rctx); rerr != nil {
			// Closing the session below releases the lock anyway.
			fmt.Fprintf(a.stderr, "chubbyfs: %s %s: release: %s\n", r.verb, p, client.Describe(rerr))
		}
	}
	if err != nil {
		return err
	}
	if status == exitOK {
		return nil
	}
	return &exitError{code: status}
}

// takeLock opens p (creating it) and acquires its lock in mode, as lock's
// flags say.
func takeLock(setupCtx, waitCtx context.Context, s *client.Session, p string, mode chubby.LockMode, f lockFlags) (*chubby.Sequencer, func(context.Context) error, error) {
	h, err := s.Open(setupCtx, p, client.OpenOptions{Create: chubby.CreateMode_OPEN_OR_CREATE})
	if err != nil {
		return nil, nil, err
	}
	seq, err := acquire(waitCtx, h, mode, f.wait, lockOptions(f.lockDelay))
	if err != nil {
		return nil, nil, err
	}
	return seq, h.Release, nil
}

// lockOptions turns --lock-delay (0: none) into LockOptions.
func lockOptions(lockDelay time.Duration) client.LockOptions {
	if lockDelay == 0 {
		return client.LockOptions{LockDelay: client.NoLockDelay}
	}
	return client.LockOptions{LockDelay: lockDelay}
}

// acquire waits for the lock: at most wait, or for as long as it takes when
// wait is 0 (in turns of the longest wait one Acquire may ask for).
func acquire(ctx context.Context, h *client.Handle, mode chubby.LockMode, wait time.Duration, opts client.LockOptions) (*chubby.Sequencer, error) {
	maxWait := time.Duration(chubby.MAX_ACQUIRE_WAIT_MS) * time.Millisecond
	if wait > 0 {
		if wait > maxWait {
			// Several turns, the last one short.
			deadline := time.Now().Add(wait)
			for {
				turn := min(time.Until(deadline), maxWait)
				if turn <= 0 {
					turn = time.Millisecond
				}
				seq, err := h.Acquire(ctx, mode, turn, opts)
				if err == nil || !client.IsCode(err, chubby.ErrorCode_TIMED_OUT) || time.Until(deadline) <= 0 {
					return seq, err
				}
			}
		}
		return h.Acquire(ctx, mode, wait, opts)
	}
	for {
		seq, err := h.Acquire(ctx, mode, maxWait, opts)
		if err == nil || !client.IsCode(err, chubby.ErrorCode_TIMED_OUT) {
			return seq, err
		}
	}
}

// runCommand runs argv with CHUBBY_SEQUENCER set and the I/O passed
// through, forwarding the signals arriving on sigs, and returns its exit
// status. If the lock is lost first (lostHelp: the session in jeopardy or
// ended, watch invalid, the sequencer found invalid), COMMAND gets
// lost.signal and, after lost.grace, SIGKILL, and runCommand reports lost
// with an exit-1 error.
func (a *app) runCommand(ctx context.Context, s *client.Session, seq *chubby.Sequencer, watch *client.Handle, argv []string,
	sigs <-chan os.Signal, lost lostPolicy) (status int, wasLost bool, err error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), EnvSequencer+"="+client.FormatSequencer(seq))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = a.stdin, a.stdout, a.stderr

	if err := cmd.Start(); err != nil {
		code := exitCannotExec
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = exitNotFound
		}
		return 0, false, &exitError{code: code, msg: fmt.Sprintf("lock %s: cannot run %s: %v", seq.GetPath(), argv[0], err)}
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	stop := func(why string) (int, bool, error) {
		_ = cmd.Process.Signal(lost.signal)
		return 0, true, a.reap(cmd, waited, lost, fmt.Sprintf("lock %s: %s while %s ran; sent it %s", seq.GetPath(), why, argv[0], lost.name))
	}

	events, invalid := s.Events(), watch.Events()
	checked := make(chan string, 1) // why the lock is lost, from a sequencer check
	checking := false
	check := func() {
		if checking {
			return
		}
		checking = true
		go func() {
			cctx, cancel := context.WithTimeout(ctx, lockCheckTimeout)
			defer cancel()
			valid, reason, err := s.Client().CheckSequencer(cctx, seq)
			switch {
			case err != nil:
				checked <- "" // cannot tell: the session's own state decides
			case !valid:
				checked <- "lock lost (" + reason + ")"
			default:
				checked <- ""
			}
		}()
	}
	for {
		select {
		case ev, ok := <-events:
			switch {
			case ok && (ev.Kind == client.EventMasterChanged || ev.Kind == client.EventLostEvents):
				// A deletion's event may be among those lost, and a new
				// master may know the lock otherwise: ask.
				check()
				continue
			case ok && ev.Kind != client.EventJeopardy && ev.Kind != client.EventExpired:
				continue
			}
			// The local lease ran out: the master may have ended the session
			// and given the lock to someone else. A lock holder cannot
			// tell, so COMMAND stops now rather than at the grace period's
			// end.
			return stop("session in jeopardy (its lease ran out without a renewal)")
		case ev, ok := <-invalid:
			if ok && ev.Kind == chubby.EventKind_EVENTS_LOST {
				check()
				continue
			}
			if ok && ev.Kind != chubby.EventKind_HANDLE_INVALID {
				continue
			}
			// The node is gone, and its lock with it: another client may
			// make the file again and lock it.
			return stop("lock lost: the file was deleted")
		case why := <-checked:
			checking = false
			if why != "" {
				return stop(why)
			}
		case err := <-waited:
			status, err := exitStatus(err)
			return status, false, err
		case sig := <-sigs:
			_ = cmd.Process.Signal(sig)
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
			return 0, false, a.reap(cmd, waited, lost, fmt.Sprintf("lock %s: %v; sent %s SIGTERM", seq.GetPath(), ctx.Err(), argv[0]))
		case <-s.Done():
			// The lock may be someone else's by now: stop COMMAND.
			return stop("session lost (" + client.Describe(s.Err()) + ")")
		}
	}
}

// reap waits for a COMMAND that was signalled, killing it after
// lost.grace, and returns the exit-1 error with msg.
func (a *app) reap(cmd *exec.Cmd, waited <-chan error, lost lostPolicy, msg string) error {
	fmt.Fprintf(a.stderr, "chubbyfs: %s\n", msg)
	t := time.NewTimer(lost.grace)
	defer t.Stop()
	select {
	case <-waited:
	case <-t.C:
		_ = cmd.Process.Kill()
		<-waited
	}
	return &exitError{code: exitRefused}
}

// exitStatus turns cmd.Wait's error into COMMAND's exit status.
func exitStatus(err error) (int, error) {
	if err == nil {
		return 0, nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	// The process ran but copying its I/O failed.
	return 0, &exitError{code: exitRefused, msg: fmt.Sprintf("lock: %v", err)}
}
