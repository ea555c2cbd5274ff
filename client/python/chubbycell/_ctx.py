"""Per-call deadlines and cancellation: what a Go caller's context gives a
call, for the calls of this library (their ``timeout=`` and ``cancel=``
arguments).

A call's deadline bounds all of it: its waits while the session is in
jeopardy, its attempts, its pauses between attempts and its search for the
master. A Cancel token ends a call at once from any thread: the call's
connection, if it is waiting for a reply, is shut down, and the call raises
CallCancelledError. For both, whether a call that changes the cell took
effect is unknown (as after a lost reply).
"""

import threading
import time

from .errors import CallCancelledError, DeadlineExceededError, InvalidArgumentError

__all__ = ["Cancel"]


class Cancel:
    """A cancellation token: pass it as ``cancel=`` to one or more calls;
    cancel() ends them all (and every later call given it). Thread-safe."""

    def __init__(self):
        self._mu = threading.Lock()
        self._cancelled = False
        self._hooks = {}
        self._next = 0

    @property
    def cancelled(self):
        """True once cancel() was called."""
        with self._mu:
            return self._cancelled

    def cancel(self):
        """Cancel the calls given this token (idempotent)."""
        with self._mu:
            if self._cancelled:
                return
            self._cancelled = True
            hooks, self._hooks = list(self._hooks.values()), {}
        for fn in hooks:
            fn()

    def _add(self, fn):
        """Run fn() on cancel (at once if cancelled); return a key for _remove."""
        with self._mu:
            if not self._cancelled:
                self._next += 1
                self._hooks[self._next] = fn
                return self._next
        fn()
        return None

    def _remove(self, key):
        if key is not None:
            with self._mu:
                self._hooks.pop(key, None)


class CallCtx:
    """One call's deadline (monotonic seconds, or None) and Cancel token (or None)."""

    __slots__ = ("deadline", "cancel", "timeout")

    def __init__(self, timeout=None, cancel=None):
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                    or not timeout > 0 or timeout != timeout or timeout == float("inf")):
            raise InvalidArgumentError("timeout must be a positive finite number of seconds or None, not %r"
                                       % (timeout,))
        if cancel is not None and not isinstance(cancel, Cancel):
            raise InvalidArgumentError("cancel must be a chubbycell.Cancel or None, not %s" % type(cancel).__name__)
        self.timeout = timeout
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.cancel = cancel

    def left(self):
        """Seconds to the deadline (None: no deadline)."""
        return None if self.deadline is None else self.deadline - time.monotonic()

    def ended(self):
        """True if the call is cancelled or its deadline has passed."""
        return (self.cancel is not None and self.cancel.cancelled) or (
            self.deadline is not None and time.monotonic() >= self.deadline)

    def check(self, op="", path=""):
        """Raise CallCancelledError or DeadlineExceededError if the call must end now."""
        if self.cancel is not None and self.cancel.cancelled:
            raise CallCancelledError("the call was cancelled", op=op, path=path)
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise DeadlineExceededError("the call's deadline (%.3gs) passed" % self.timeout, op=op, path=path)

    def bound(self, seconds):
        """seconds, cut to the time left before the deadline (at least a millisecond)."""
        left = self.left()
        if left is None:
            return seconds
        return max(0.001, min(seconds, left)) if seconds is not None else max(0.001, left)


#: The context of a call given neither a timeout nor a cancel token.
NONE = CallCtx()
