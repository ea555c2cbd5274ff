package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
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
	// killGrace is how long COMMAND has to exit after SIGTERM when the
	// session is lost, before it is killed.
	killGrace = 10 * time.Second
	// Exit statuses when COMMAND cannot be started, as env(1) and shells use.
	exitCannotExec = 126
	exitNotFound   = 127
)

type lockFlags struct {
	shared    bool
	wait      time.Duration
	lockDelay time.Duration
}

func (a *app) lockCommand() *cobra.Command {
	var f lockFlags
	cmd := &cobra.Command{
		Use:   "lock [--shared] [--timeout D] [--lock-delay D] PATH -- COMMAND [ARG...]",
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
COMMAND. If the session with the cell is lost while COMMAND runs (the lock
may then be granted to someone else), COMMAND gets SIGTERM (SIGKILL 10 s
later), the loss is reported and lock exits 1. If COMMAND cannot be started,
lock exits 127 (not found) or 126.`,
		Example: `  chubbyfs lock /jobs/nightly -- ./nightly.sh
  chubbyfs lock --shared --timeout 30s /data/ready -- sh -c 'echo "$CHUBBY_SEQUENCER"'`,
		Args: anyArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, argv, err := lockArgs(cmd, "lock", args, f.wait, f.lockDelay)
			if err != nil {
				return err
			}
			mode := chubby.LockMode_EXCLUSIVE
			if f.shared {
				mode = chubby.LockMode_SHARED
			}
			return a.runLocked(cmd.Context(), p, lockedRun{
				verb: "lock", waitingFor: "the lock", notWon: "not granted", wait: f.wait,
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
	// From here on SIGINT and SIGTERM go to COMMAND; the forwarding channel
	// is in place before the waiting phase's handler goes.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	stopSignals()

	status, err := a.runCommand(ctx, s, seq, argv, sigs)
	rctx, rcancel := releaseContext(ctx)
	defer rcancel()
	// Let go only from a safe session: in jeopardy a call would wait for
	// the master (up to the release timeout), and the lock ends with the
	// session anyway.
	if s.Err() == nil && s.State() == client.StateSafe {
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
// status. If the session goes into jeopardy or ends first, COMMAND is
// terminated and an error is returned.
func (a *app) runCommand(ctx context.Context, s *client.Session, seq *chubby.Sequencer, argv []string, sigs <-chan os.Signal) (int, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), EnvSequencer+"="+client.FormatSequencer(seq))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = a.stdin, a.stdout, a.stderr

	if err := cmd.Start(); err != nil {
		code := exitCannotExec
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = exitNotFound
		}
		return 0, &exitError{code: code, msg: fmt.Sprintf("lock %s: cannot run %s: %v", seq.GetPath(), argv[0], err)}
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	events := s.Events()
	for {
		select {
		case ev, ok := <-events:
			if ok && ev.Kind != client.EventJeopardy && ev.Kind != client.EventExpired {
				continue
			}
			// The local lease ran out: the master may have ended the session
			// and given the lock to someone else. A lock holder cannot
			// tell, so COMMAND stops now rather than at the grace period's
			// end.
			_ = cmd.Process.Signal(syscall.SIGTERM)
			return 0, a.reap(cmd, waited, fmt.Sprintf("lock %s: session in jeopardy while %s ran (its lease ran out without a renewal); sent it SIGTERM",
				seq.GetPath(), argv[0]))
		case err := <-waited:
			return exitStatus(err)
		case sig := <-sigs:
			_ = cmd.Process.Signal(sig)
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
			return 0, a.reap(cmd, waited, fmt.Sprintf("lock %s: %v; sent %s SIGTERM", seq.GetPath(), ctx.Err(), argv[0]))
		case <-s.Done():
			// The lock may be someone else's by now: stop COMMAND.
			_ = cmd.Process.Signal(syscall.SIGTERM)
			return 0, a.reap(cmd, waited, fmt.Sprintf("lock %s: session lost while %s ran (%s); sent it SIGTERM",
				seq.GetPath(), argv[0], client.Describe(s.Err())))
		}
	}
}

// reap waits for a COMMAND that was sent SIGTERM, killing it after
// killGrace, and returns the exit-1 error with msg.
func (a *app) reap(cmd *exec.Cmd, waited <-chan error, msg string) error {
	fmt.Fprintf(a.stderr, "chubbyfs: %s\n", msg)
	t := time.NewTimer(killGrace)
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
