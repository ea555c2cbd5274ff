"""chubbycell — the Python client library of a Chubby lock cell.

A cell is a replicated lock service with a small file system (see
idl/chubby.thrift). This library talks to it over Apache Thrift (strict
binary protocol, framed or buffered transport) with the modules the Apache
Thrift compiler generates from the IDL (``./build.sh python``), and behaves
like the Go client (package client):

- :class:`Cell` finds the master and follows NOT_MASTER hints, asks every
  replica where the master is when nothing says, retries what is safe to
  retry, and reconnects after transport failures.
- :class:`Session` (``cell.session()``) is kept alive by a KeepAlive thread:
  SAFE while its local lease runs, JEOPARDY when it ran out with no reply
  (the thread keeps looking for the master for the grace period), then SAFE
  again or EXPIRED; ``on_jeopardy``, ``on_safe``, ``on_expired`` and
  ``on_master_changed`` callbacks tell of it.
- :class:`Handle` (``session.open(path)``) reads, writes, lists and deletes
  the node and takes its lock; ``with session.lock(path):`` holds a lock
  for a block.
- Events asked for at open arrive on KeepAlive replies and are
  acknowledged on the next KeepAlive; each is delivered once, in order,
  also across a failover (``handle.events()`` or ``on_event``).
- Calls that change the cell carry a RequestID (a per-session number and
  the floor of the calls in flight), so a call resent after a lost reply or
  a failover is applied once.
- Failures raise a typed :class:`ChubbyError` subclass per error code.
- Mutual TLS (:class:`TLSConfig`, or the Go client's ``CHUBBY_TLS_*``
  environment variables): the client certificate's common name is the
  principal the cell's ACLs name; ``cell.who_am_i()`` says which it is,
  ``handle.set_acl(ACLNames(...))`` changes a node's ACL names.
- ``session.multi(compares, ops)`` applies ops all or nothing if the
  compares hold (:class:`Compare`, :class:`Op`); ``cell.get_timestamps(n)``
  returns a range of n timestamps of the cell's oracle.
- Every call takes ``timeout=`` (seconds for all of it:
  :class:`DeadlineExceededError`) and ``cancel=`` (a :class:`Cancel`
  token: :class:`CallCancelledError`).
- :mod:`chubbycell.aio` has the same calls as coroutines (the threaded
  calls run on a thread pool; cancelling the task cancels the call).
- Sessions cache file contents, Stats and listings (``cache=False`` turns
  it off): the master invalidates a session's copy, and waits for the
  acknowledgement, before the node changes, so a cached read is never
  stale; ``session.cache_stats()`` counts hits.

Quick start::

    import chubbycell

    with chubbycell.Cell("127.0.0.1:7000") as cell, cell.session() as s:
        s.mkdir("/locks", parents=True)  # a lock file's parent must exist
        with s.lock("/locks/nightly") as held:
            print("holding", held.sequencer)

Every class is safe for use by several threads at once.
"""

from . import _wire  # noqa: F401  (fails early, with advice, if the generated modules are missing)
from ._ctx import Cancel
from ._tls import ENV_TLS_CA, ENV_TLS_CERT, ENV_TLS_KEY, ENV_TLS_SERVER_NAME, TLSConfig
from .cell import DEFAULT_ADDR, ENV_CELL, Cell
from .errors import *  # noqa: F401,F403
from .errors import __all__ as _errors_all
from .handle import Handle
from .session import HeldLock, Session
from .types import *  # noqa: F401,F403
from .types import __all__ as _types_all

__all__ = ["Cell", "Session", "Handle", "HeldLock", "ENV_CELL", "DEFAULT_ADDR", "Cancel", "TLSConfig",
           "ENV_TLS_CA", "ENV_TLS_CERT", "ENV_TLS_KEY", "ENV_TLS_SERVER_NAME"] + _errors_all + _types_all
