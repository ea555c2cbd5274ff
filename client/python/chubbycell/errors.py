"""Typed exceptions of the chubbycell library.

Every failure the library reports is a :class:`ChubbyError`. A call the cell
refused raises the subclass named after the cell's error code (one class per
``ErrorCode`` of idl/chubby.thrift: :class:`NotFoundError` for NOT_FOUND,
:class:`LockHeldError` for LOCK_HELD, ...); its ``code`` attribute is that
:class:`~chubbycell.types.ErrorCode`. Input the library rejects before sending
anything raises the class the cell would have used (usually
:class:`InvalidArgumentError`, which is also a :class:`ValueError`), and
changes nothing.

The library's own conditions have ``code`` None, except a session that
expired locally (its grace period ran out), which raises
:class:`SessionExpiredError` exactly as when the cell says so:

- :class:`SessionClosedError`: the session was closed with ``Session.close``.
- :class:`CellClosedError`: the :class:`~chubbycell.Cell` was closed.
- :class:`TransportError`: the connection failed during a call, so whether
  the cell acted is unknown; :class:`CallTimeoutError` (the reply did not
  come in time) and :class:`UnreachableError` (no connection could be made:
  the request never left, so the cell certainly did not act) are kinds of it.
- :class:`DeadlineExceededError` (a CallTimeoutError): the call's own
  ``timeout=`` passed; :class:`CallCancelledError`: its ``cancel=`` token
  (or the asyncio task awaiting it) was cancelled.
- :class:`ProtocolError`: the replica answered something that is not a valid
  answer (a Thrift application error, a reply missing required fields).
"""

from .types import ErrorCode

__all__ = [
    "ChubbyError", "NotFoundError", "ExistsError", "NotEmptyError", "NotDirectoryError",
    "IsDirectoryError", "InvalidArgumentError", "TooLargeError", "PermissionDeniedError",
    "LockHeldError", "LockNotHeldError", "SessionExpiredError", "HandleInvalidError",
    "NotMasterError", "StaleEpochError", "UnavailableError", "GenerationMismatchError",
    "TimedOutError", "LimitExceededError", "InternalError", "SessionClosedError",
    "CellClosedError", "TransportError", "CallTimeoutError", "UnreachableError",
    "ProtocolError", "DeadlineExceededError", "CallCancelledError", "error_class",
]


class ChubbyError(Exception):
    """A failed call or operation of the library.

    Attributes:
        code: the cell's :class:`ErrorCode`, or None for a condition of the
            library itself (closed session, transport failure, ...).
        message: the human-readable reason (the cell's message, if any).
        op: the operation that failed ("open", "acquire", ...) or "".
        path: the node's path, or "" for calls that name none.
        master_address: for NOT_MASTER, the master's address if the replica
            knew it, else None.
        epoch: for NOT_MASTER and STALE_EPOCH, the current master epoch if
            known, else None.
    """

    #: The error code this class stands for (None: the library's own).
    CODE = None

    def __init__(self, message="", *, op="", path="", code=None, master_address=None, epoch=None):
        self.code = ErrorCode(code) if code is not None else (
            ErrorCode(self.CODE) if self.CODE is not None else None)
        self.message = message
        self.op = op
        self.path = path
        self.master_address = master_address
        self.epoch = epoch
        super().__init__(self.__str__())

    def __str__(self):
        reason = self.message
        if self.code is not None:
            text = self.code.name.lower().replace("_", " ")
            reason = text + (": " + self.message if self.message else "")
        if self.master_address:
            reason += " (master at %s)" % self.master_address
        where = self.op
        if self.path:
            where = (where + " " + self.path).strip()
        return "chubby: " + (where + ": " if where else "") + reason

    def with_context(self, op, path=""):
        """Return the same kind of error naming op and path (if not named yet)."""
        if self.op:
            return self
        e = type(self).__new__(type(self))
        ChubbyError.__init__(e, self.message, op=op, path=path, code=self.code,
                             master_address=self.master_address, epoch=self.epoch)
        e.__cause__ = self.__cause__
        return e


def _coded(name, code, doc, *bases):
    cls = type(name, (ChubbyError,) + bases, {"CODE": code, "__doc__": doc})
    return cls


NotFoundError = _coded("NotFoundError", ErrorCode.NOT_FOUND, "NOT_FOUND: no node at that path.", LookupError)
ExistsError = _coded("ExistsError", ErrorCode.EXISTS, "EXISTS: a node already exists at that path.")
NotEmptyError = _coded("NotEmptyError", ErrorCode.NOT_EMPTY,
                       "NOT_EMPTY: the directory has children and recursive was not set.")
NotDirectoryError = _coded("NotDirectoryError", ErrorCode.NOT_DIRECTORY,
                           "NOT_DIRECTORY: a path component (or the ReadDir target) is a file.")
IsDirectoryError = _coded("IsDirectoryError", ErrorCode.IS_DIRECTORY,
                          "IS_DIRECTORY: a content operation on a directory.")
InvalidArgumentError = _coded("InvalidArgumentError", ErrorCode.INVALID_ARGUMENT,
                              "INVALID_ARGUMENT: a malformed path, a field out of range, ... "
                              "(also a ValueError).", ValueError)
TooLargeError = _coded("TooLargeError", ErrorCode.TOO_LARGE,
                       "TOO_LARGE: content over MAX_CONTENT_BYTES, or a limit of the cell.")
PermissionDeniedError = _coded("PermissionDeniedError", ErrorCode.PERMISSION_DENIED,
                               "PERMISSION_DENIED: the handle's mode or the node's ACL does not allow it.")
LockHeldError = _coded("LockHeldError", ErrorCode.LOCK_HELD,
                       "LOCK_HELD: TryAcquire found the lock unavailable, or this handle holds it already.")
LockNotHeldError = _coded("LockNotHeldError", ErrorCode.LOCK_NOT_HELD,
                          "LOCK_NOT_HELD: Release or GetSequencer on a handle that holds no lock.")
SessionExpiredError = _coded("SessionExpiredError", ErrorCode.SESSION_EXPIRED,
                             "SESSION_EXPIRED: the session is over (the cell ended it, or its grace "
                             "period ran out with no master reached); its locks are gone.")
HandleInvalidError = _coded("HandleInvalidError", ErrorCode.HANDLE_INVALID,
                            "HANDLE_INVALID: unknown or closed handle, or its node was deleted or re-created.")
NotMasterError = _coded("NotMasterError", ErrorCode.NOT_MASTER,
                        "NOT_MASTER: the replica is not the master (master_address says where it is).")
StaleEpochError = _coded("StaleEpochError", ErrorCode.STALE_EPOCH,
                         "STALE_EPOCH: the request named an older master epoch.")
UnavailableError = _coded("UnavailableError", ErrorCode.UNAVAILABLE,
                          "UNAVAILABLE: the cell cannot serve now (starting, overloaded, shutting down).")
GenerationMismatchError = _coded("GenerationMismatchError", ErrorCode.GENERATION_MISMATCH,
                                 "GENERATION_MISMATCH: the expected content generation differs.")
TimedOutError = _coded("TimedOutError", ErrorCode.TIMED_OUT,
                       "TIMED_OUT: Acquire's wait passed before the lock was granted.")
LimitExceededError = _coded("LimitExceededError", ErrorCode.LIMIT_EXCEEDED,
                            "LIMIT_EXCEEDED: a per-cell or per-session limit was reached.")
InternalError = _coded("InternalError", ErrorCode.INTERNAL,
                       "INTERNAL: a bug of the cell; the request may or may not have taken effect.")

_BY_CODE = {cls.CODE: cls for cls in (
    NotFoundError, ExistsError, NotEmptyError, NotDirectoryError, IsDirectoryError,
    InvalidArgumentError, TooLargeError, PermissionDeniedError, LockHeldError,
    LockNotHeldError, SessionExpiredError, HandleInvalidError, NotMasterError,
    StaleEpochError, UnavailableError, GenerationMismatchError, TimedOutError,
    LimitExceededError, InternalError)}

assert set(_BY_CODE) == set(ErrorCode), "one exception class per ErrorCode"


def error_class(code):
    """Return the exception class of an :class:`ErrorCode` (ChubbyError for an unknown code)."""
    try:
        return _BY_CODE[ErrorCode(code)]
    except ValueError:
        return ChubbyError


class SessionClosedError(ChubbyError):
    """The session was closed with ``Session.close`` (or its Cell was closed)."""


class CellClosedError(ChubbyError):
    """The :class:`~chubbycell.Cell` was closed."""


class TransportError(ChubbyError):
    """The connection to a replica failed during a call: whether the cell
    acted on the request is unknown. ``address`` is the replica's."""

    def __init__(self, message="", *, address="", **kw):
        self.address = address
        super().__init__(message, **kw)


class CallTimeoutError(TransportError):
    """The replica did not answer within the call's timeout."""


class UnreachableError(TransportError):
    """No replica of the cell could be reached (connection refused, reset or
    timed out while connecting) within the call's retries: the request never
    left, so the cell did not act on it."""


class ProtocolError(ChubbyError):
    """The replica's answer is not a valid answer (a Thrift application
    error, a reply missing a required field)."""


def from_wire(e, op="", path=""):
    """Turn the generated ``ChubbyError`` exception into the typed one."""
    code = getattr(e, "code", None)
    cls = error_class(code) if code is not None else ChubbyError
    try:
        code = ErrorCode(code)
    except (ValueError, TypeError):
        return ProtocolError("the cell answered an unknown error code %r: %s" % (code, getattr(e, "message", "")),
                             op=op, path=path)
    err = cls(e.message or "", op=op, path=path, code=code,
              master_address=getattr(e, "master_address", None),
              epoch=getattr(e, "epoch", None))
    return err


class DeadlineExceededError(CallTimeoutError):
    """The call's own deadline (its ``timeout=`` argument) passed before it
    completed. Whether a call that changes the cell took effect is unknown,
    as for any CallTimeoutError: calls with a RequestID may be sent again."""


class CallCancelledError(ChubbyError):
    """The call was cancelled (its ``cancel=`` token, or the asyncio task
    awaiting it) before it completed. Whether a call that changes the cell
    took effect is unknown."""
