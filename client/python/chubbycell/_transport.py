"""Connections to replicas: one TCP connection (TLS over it when the Cell has
a TLSConfig, see _tls.py) speaks the strict binary protocol over the framed
(default) or buffered transport, and carries the
generated clients of all five services. The cell serves the five services
together on its one port as a combined service (no TMultiplexedProtocol):
a request's method name alone says which service it is for, so one
connection serves them all, as tools/interop/client.py shows.

A connection carries one call at a time, so a Pool keeps idle connections
per address and every call takes one (or opens a new one) and gives it
back after a clean answer. A connection that failed in any way is closed,
never reused: what was half-read of it is unknown.
"""

import select
import socket
import threading

from thrift.protocol import TBinaryProtocol
from thrift.transport import TSocket, TTransport

from . import _wire
from .types import split_addr

# Bounds on what one reply may make the decoder allocate (a reply is at most
# a few MiB: contents are at most 256 KiB, a Multi's 1 MiB).
MAX_STRING_BYTES = 16 << 20
MAX_CONTAINER_ITEMS = 4 << 20

TRANSPORTS = ("framed", "buffered")

#: Idle connections kept per replica address.
MAX_IDLE_PER_ADDR = 8


class ConnectFailed(Exception):
    """No connection could be made to the address: the request never left."""

    def __init__(self, addr, err):
        super().__init__("cannot connect to %s: %s" % (addr, err))
        self.addr = addr
        self.err = err


class Conn:
    """One connection to a replica, with a client of every service."""

    def __init__(self, addr, transport, connect_timeout, tls=None):
        self.addr = addr
        host, port = split_addr(addr)
        try:
            sock = socket.create_connection((host, port), timeout=connect_timeout)
        except OSError as e:
            raise ConnectFailed(addr, e) from e
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            # The handshake is part of connecting: bounded by connect_timeout,
            # and a failure means the request never left.
            try:
                sock = tls.wrap(sock, host)
            except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
                sock.close()
                raise ConnectFailed(addr, e) from e
        self.sock = sock
        ts = TSocket.TSocket()
        ts.setHandle(sock)
        if transport == "framed":
            self.trans = TTransport.TFramedTransport(ts)
        else:
            self.trans = TTransport.TBufferedTransport(ts)
        # Strict writes (versioned message headers), as the cell expects.
        # python3-thrift's C codec when it is built (it falls back by itself).
        proto = TBinaryProtocol.TBinaryProtocolAccelerated(
            self.trans, strictRead=False, strictWrite=True,
            string_length_limit=MAX_STRING_BYTES, container_length_limit=MAX_CONTAINER_ITEMS)
        self.session = _wire.SessionService.Client(proto)
        self.fs = _wire.FileSystem.Client(proto)
        self.lock = _wire.Lock.Client(proto)
        self.cell = _wire.CellService.Client(proto)
        self.oracle = _wire.Oracle.Client(proto)
        self.closed = False
        self._mu = threading.Lock()

    def set_timeout(self, seconds):
        """Bound every read and write of the next call to seconds."""
        self.sock.settimeout(seconds)

    def alive(self):
        """False if the peer has closed the connection (or sent something
        unasked): an idle connection must have nothing to read."""
        if self.closed:
            return False
        try:
            r, _, _ = select.select([self.sock], [], [], 0)
        except (OSError, ValueError):
            return False
        return not r

    def abort(self):
        """Make a call blocked on this connection in another thread fail at
        once (it sees the connection end); the connection is then closed."""
        with self._mu:
            if not self.closed:
                try:
                    self.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        """Close the connection (idempotent)."""
        with self._mu:
            if self.closed:
                return
            self.closed = True
            try:
                self.sock.close()
            except OSError:
                pass


class Pool:
    """Idle connections by address. Thread-safe."""

    def __init__(self, transport, connect_timeout, tls=None):
        self.transport = transport
        self.connect_timeout = connect_timeout
        self.tls = tls
        self._idle = {}
        self._mu = threading.Lock()
        self._closed = False

    def get(self, addr):
        """An idle live connection to addr, or a new one (ConnectFailed)."""
        while True:
            with self._mu:
                lst = self._idle.get(addr)
                c = lst.pop() if lst else None
            if c is None:
                break
            if c.alive():
                return c
            c.close()
        return Conn(addr, self.transport, self.connect_timeout, self.tls)

    def put(self, c):
        """Give back a connection whose last call ended cleanly."""
        with self._mu:
            if not self._closed and not c.closed:
                lst = self._idle.setdefault(c.addr, [])
                if len(lst) < MAX_IDLE_PER_ADDR:
                    lst.append(c)
                    return
        c.close()

    def close(self):
        """Close every idle connection; later puts close theirs."""
        with self._mu:
            self._closed = True
            idle, self._idle = self._idle, {}
        for lst in idle.values():
            for c in lst:
                c.close()
