#!/usr/bin/python3
"""Hold a Chubby lock while a command runs (like flock, or the Go CLI's
``chubbyfs lock``).

usage: lock.py [--cell ADDRS] [--shared] [--timeout SECONDS] [--lock-delay SECONDS]
               PATH -- COMMAND [ARG...]

It opens the file PATH (creating it if missing; its parent directory must
exist), acquires its lock — exclusive, or shared with --shared — and runs
COMMAND while holding it, with standard input, output and error passed
through and the lock's sequencer in the environment variable
CHUBBY_SEQUENCER (chubby-seq:v1:<E|S>:<generation>:<instance>:<path>), which
COMMAND can hand to the servers it talks to so they can check it. When
COMMAND ends, the lock is released and lock.py exits with COMMAND's exit
status (128+N if signal N killed it).

--timeout bounds the wait for the lock (exit 1 when it passes; default: wait
as long as it takes). --lock-delay (default 0: none; at most 60) keeps the
lock from others that long if this process dies holding it. SIGINT and
SIGTERM are passed on to COMMAND. If the session goes into jeopardy or
expires while COMMAND runs (the lock may then be given to someone else),
COMMAND gets SIGTERM (SIGKILL 10 s later) and lock.py exits 1. Exit 2: usage
errors; 126/127: COMMAND cannot be run / was not found.

The cell is --cell (comma-separated host:port list) or CHUBBY_CELL, else
127.0.0.1:7000. It uses chubbycell as installed (pip install
./client/python), else the package beside this example (after ./build.sh
python).
"""

import argparse
import os
import signal
import subprocess
import sys
import threading

try:
    import chubbycell
except ImportError:  # not installed: the package beside this example
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import chubbycell

EXIT_REFUSED, EXIT_USAGE, EXIT_CANNOT_EXEC, EXIT_NOT_FOUND = 1, 2, 126, 127
KILL_GRACE = 10.0


class LockLost(Exception):
    """The session went into jeopardy or ended while COMMAND ran."""


class Interrupted(Exception):
    """SIGINT or SIGTERM while waiting for the lock."""


def parse(argv):
    p = argparse.ArgumentParser(prog="lock.py", description="Hold a Chubby lock while a command runs.")
    p.add_argument("--cell", help="the cell's replicas, host:port,... (default: $CHUBBY_CELL)")
    p.add_argument("--shared", action="store_true", help="take a shared lock (default: exclusive)")
    p.add_argument("--timeout", type=float, help="give up waiting for the lock after this many seconds")
    p.add_argument("--lock-delay", type=float, default=0.0,
                   help="if this process dies holding the lock, keep it from others this long (0..60 s)")
    p.add_argument("path")
    p.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    if a.command and a.command[0] == "--":
        a.command = a.command[1:]
    if not a.command:
        p.error("want PATH -- COMMAND [ARG...]")
    try:
        chubbycell.validate_path(a.path)
        if a.timeout is not None and not a.timeout > 0:
            raise chubbycell.InvalidArgumentError("--timeout must be positive")
        if not 0 <= a.lock_delay <= chubbycell.MAX_LOCK_DELAY_MS / 1000:
            raise chubbycell.InvalidArgumentError("--lock-delay must be in 0..60")
        cell = chubbycell.Cell(a.cell)
    except chubbycell.InvalidArgumentError as e:
        p.error(e.message)
    return a, cell


def run(cmd, seq, lost):
    """Run cmd with the sequencer in its environment until it exits (return
    its status) or the lock is lost (raise LockLost)."""
    env = dict(os.environ, CHUBBY_SEQUENCER=str(seq))
    try:
        proc = subprocess.Popen(cmd, env=env)
    except FileNotFoundError as e:
        print("lock.py: cannot run %s: %s" % (cmd[0], e), file=sys.stderr)
        return EXIT_NOT_FOUND
    except OSError as e:
        print("lock.py: cannot run %s: %s" % (cmd[0], e), file=sys.stderr)
        return EXIT_CANNOT_EXEC
    forward = lambda signum, _frame: proc.send_signal(signum)  # noqa: E731
    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    while True:
        try:
            rc = proc.wait(timeout=0.1)
            return rc if rc >= 0 else 128 - rc
        except subprocess.TimeoutExpired:
            pass
        if lost.is_set():
            proc.terminate()
            try:
                proc.wait(timeout=KILL_GRACE)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise LockLost()


def main(argv=None):
    a, cell = parse(sys.argv[1:] if argv is None else argv)
    lost = threading.Event()

    def interrupted(_signum, _frame):
        raise Interrupted()

    signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)
    try:
        with cell:
            s = cell.session(client_name="lock.py:%d" % os.getpid(),
                             on_jeopardy=lambda _s: lost.set(), on_expired=lambda _s, _e: lost.set())
            try:
                with s.lock(a.path, shared=a.shared, timeout=a.timeout, lock_delay=a.lock_delay) as held:
                    try:
                        return run(a.command, held.sequencer, lost)
                    except LockLost:
                        # In jeopardy a release would wait for the master;
                        # closing the session ends the lock at once if the
                        # cell can be reached, and at the lease's end if not.
                        s.close()
                        raise
            finally:
                s.close()
    except LockLost:
        print("lock.py: lock %s: session lost while %s ran; sent it SIGTERM" % (a.path, a.command[0]),
              file=sys.stderr)
    except Interrupted:
        print("lock.py: lock %s: interrupted while waiting for the lock" % a.path, file=sys.stderr)
    except chubbycell.TimedOutError:
        print("lock.py: lock %s: not granted within %gs (--timeout)" % (a.path, a.timeout), file=sys.stderr)
    except chubbycell.ChubbyError as e:
        print("lock.py: %s" % e, file=sys.stderr)
    return EXIT_REFUSED


if __name__ == "__main__":
    sys.exit(main())
