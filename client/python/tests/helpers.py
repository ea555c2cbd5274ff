"""Shared pieces of the chubbycell tests: the cell's addresses, unique
paths, bounded waits, child processes that die with the test, and a
frame-aware TCP proxy that can lose a reply on purpose.

The tests run against a real cell started by client/python/python_test.go,
which passes its replicas' addresses in CHUBBY_CELL.
"""

import collections
import ctypes
import itertools
import os
import queue
import signal
import socket
import struct
import subprocess
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)  # client/python
PYTHON = "/usr/bin/python3"

_counter = itertools.count(1)
_RUN = "%d-%d" % (os.getpid(), int(time.time() * 1000) % 1000000)


def cell_addrs():
    """The cell's replica addresses (CHUBBY_CELL). A missing variable fails
    the test (RuntimeError); it does not skip it."""
    env = os.environ.get("CHUBBY_CELL", "").strip()
    if not env:
        raise RuntimeError("CHUBBY_CELL is not set: run these tests with go test ./client/python")
    return [a.strip() for a in env.split(",")]


def unique(prefix="t"):
    """A fresh top-level path for one test (the tests share one cell)."""
    return "/py-%s-%s-%d" % (prefix, _RUN, next(_counter))


def wait_until(pred, timeout, interval=0.05, what="condition"):
    """Poll pred() until it is true (return its value) or timeout seconds
    pass (raise AssertionError)."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise AssertionError("%s not reached within %gs" % (what, timeout))
        time.sleep(interval)


_PR_SET_PDEATHSIG = 1


def _die_with_parent():
    # In the child, before exec: SIGKILL when the test process dies, and a
    # process group of its own.
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class Child:
    """A python child process talking to the test by lines: its stdout is
    read into a queue; send() writes a line to its stdin. It is killed by
    its own pid when stop() is called (tests call it in a cleanup)."""

    def __init__(self, args, env=None):
        e = dict(os.environ)
        e["PYTHONPATH"] = ROOT
        e["PYTHONUNBUFFERED"] = "1"
        if env:
            e.update(env)
        self.proc = subprocess.Popen([PYTHON] + list(args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, env=e, cwd=ROOT, text=True,
                                     start_new_session=True, preexec_fn=_die_with_parent)
        self.lines = queue.Queue()
        self.output = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self.output.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def expect(self, prefix, timeout):
        """The first line starting with prefix (earlier lines skipped), within timeout seconds."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("no %r from the child within %gs; output:\n%s"
                                     % (prefix, timeout, "\n".join(self.output)))
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError("child ended before printing %r; output:\n%s"
                                     % (prefix, "\n".join(self.output)))
            if line.startswith(prefix):
                return line

    def send(self, line):
        """Write a line to the child's stdin."""
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def kill(self):
        """SIGKILL the child by its pid and reap it."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def wait(self, timeout):
        """Wait for the child to exit by itself; return its exit status."""
        return self.proc.wait(timeout=timeout)

    def stop(self):
        """Kill the child if it still runs, and close its pipes."""
        try:
            self.kill()
        finally:
            for f in (self.proc.stdin, self.proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass


def _read_exact(sock, n):
    buf = b""
    while len(buf) < n:
        b = sock.recv(n - len(buf))
        if not b:
            raise EOFError
        buf += b
    return buf


def _read_frame(sock):
    head = _read_exact(sock, 4)
    (n,) = struct.unpack("!i", head)
    if n < 0 or n > 64 << 20:
        raise EOFError
    return head + _read_exact(sock, n)


def _method(frame):
    # Strict binary message header after the frame length: version|type,
    # name length, name.
    try:
        (n,) = struct.unpack("!i", frame[8:12])
        return frame[12:12 + n].decode()
    except (struct.error, UnicodeDecodeError):
        return "?"


class Proxy:
    """A TCP proxy in front of one replica, for the framed transport. It
    forwards requests and replies frame by frame, records the method of
    every request it forwards (seen), and, armed with drop_reply(method),
    forwards the next request of that method to the replica but drops the
    replica's reply and closes the client's connection: the client sees a
    reply lost after the cell acted."""

    def __init__(self, target):
        self.target = target
        host, port = target.rsplit(":", 1)
        self._target = (host, int(port))
        self._ls = socket.create_server(("127.0.0.1", 0))
        self.addr = "127.0.0.1:%d" % self._ls.getsockname()[1]
        self._mu = threading.Lock()
        self._drop = collections.Counter()
        self.seen = []
        self.dropped = []
        self._socks = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def drop_reply(self, method, n=1):
        """Lose the replies to the next n requests of method."""
        with self._mu:
            self._drop[method] += n

    def count(self, method):
        """How many requests of method were forwarded."""
        with self._mu:
            return self.seen.count(method)

    def _accept(self):
        while True:
            try:
                c, _ = self._ls.accept()
            except OSError:
                return
            try:
                s = socket.create_connection(self._target, timeout=5)
                s.settimeout(None)
            except OSError:
                c.close()
                continue
            with self._mu:
                if self._closed:
                    c.close()
                    s.close()
                    return
                self._socks += [c, s]
            pending = queue.Queue()
            threading.Thread(target=self._up, args=(c, s, pending), daemon=True).start()
            threading.Thread(target=self._down, args=(c, s, pending), daemon=True).start()

    @staticmethod
    def _shut(*socks):
        for x in socks:
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            x.close()

    def _up(self, c, s, pending):
        try:
            while True:
                f = _read_frame(c)
                m = _method(f)
                with self._mu:
                    self.seen.append(m)
                    drop = self._drop[m] > 0
                    if drop:
                        self._drop[m] -= 1
                        self.dropped.append(m)
                pending.put(drop)
                s.sendall(f)
        except (OSError, EOFError):
            self._shut(c, s)

    def _down(self, c, s, pending):
        try:
            while True:
                f = _read_frame(s)
                if pending.get(timeout=30):
                    break  # lose this reply
                c.sendall(f)
        except (OSError, EOFError, queue.Empty):
            pass
        self._shut(c, s)

    def close(self):
        """Stop accepting and cut every connection."""
        with self._mu:
            self._closed = True
            socks, self._socks = self._socks, []
        self._ls.close()
        self._shut(*socks)


def free_addr():
    """A loopback address whose port was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return "127.0.0.1:%d" % s.getsockname()[1]
