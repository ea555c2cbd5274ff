"""Mutual TLS for the connections to a cell, as the Go client's
(client/config.go, rpc/tlsconf) does it.

A cell started with --tls-cert, --tls-key and --tls-ca speaks TLS 1.3 with
mutual authentication on its client port. The client verifies the replica's
certificate chain against the cell's CA; it checks no host name unless told
one (server_name), because replicas are reached by address and what proves
a replica is a certificate the cell's CA signed. The client presents its own
certificate, whose subject common name is its principal; without one it
calls as "anonymous".

The files are read again when they change (checked at most once a second,
when a new connection is made), so renewed certificates are used without a
restart; a reload that fails (a half-written file, a key that does not
match its certificate) keeps the previous material and is logged.
"""

import logging
import os
import ssl
import threading
import time

from .errors import InvalidArgumentError

log = logging.getLogger("chubbycell")

__all__ = ["TLSConfig", "ENV_TLS_CA", "ENV_TLS_CERT", "ENV_TLS_KEY", "ENV_TLS_SERVER_NAME"]

#: The environment variables of the client's TLS files, the Go client's:
#: read when Cell gets no tls argument.
ENV_TLS_CA = "CHUBBY_TLS_CA"
ENV_TLS_CERT = "CHUBBY_TLS_CERT"
ENV_TLS_KEY = "CHUBBY_TLS_KEY"
#: If set, the host name the replicas' certificates must carry.
ENV_TLS_SERVER_NAME = "CHUBBY_TLS_SERVER_NAME"

#: How often, at most, the files are checked for changes.
CHECK_INTERVAL = 1.0


def _stamp(path):
    st = os.stat(path)
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class TLSConfig:
    """The TLS files of a client: the CA that signed the replicas'
    certificates (ca) and, optionally, this client's certificate and key
    (both or neither; neither: the client is "anonymous"). server_name, if
    set, must be in the replicas' certificates.

    The files are loaded at once (InvalidArgumentError if they cannot be
    read or do not fit together) and again when they change.
    """

    def __init__(self, ca, cert=None, key=None, server_name=None):
        for name, v in (("ca", ca), ("cert", cert), ("key", key), ("server_name", server_name)):
            if v is not None and (not isinstance(v, str) or not v):
                raise InvalidArgumentError("TLS %s must be a non-empty str or None, not %r" % (name, v))
        if ca is None:
            raise InvalidArgumentError("TLS needs the CA that signed the replicas (ca)")
        if (cert is None) != (key is None):
            raise InvalidArgumentError("TLS cert and key go together: give both or neither")
        self.ca, self.cert, self.key, self.server_name = ca, cert, key, server_name
        self._mu = threading.Lock()
        self._checked = 0.0
        try:
            self._stamps = self._read_stamps()
            self._ctx = self._load()
        except (OSError, ssl.SSLError, ValueError) as e:
            raise InvalidArgumentError("TLS: %s" % e) from None

    @classmethod
    def from_env(cls, environ=None):
        """The TLSConfig the CHUBBY_TLS_* variables name, or None when
        CHUBBY_TLS_CA is unset (plaintext). CHUBBY_TLS_CERT or
        CHUBBY_TLS_KEY without CHUBBY_TLS_CA is an InvalidArgumentError."""
        env = os.environ if environ is None else environ
        ca, cert, key, sn = (env.get(n) or None for n in (ENV_TLS_CA, ENV_TLS_CERT, ENV_TLS_KEY,
                                                          ENV_TLS_SERVER_NAME))
        if ca is None:
            if cert is not None or key is not None:
                raise InvalidArgumentError("%s and %s need %s (the CA that signed the replicas)"
                                           % (ENV_TLS_CERT, ENV_TLS_KEY, ENV_TLS_CA))
            return None
        return cls(ca, cert, key, sn)

    def _files(self):
        return [p for p in (self.ca, self.cert, self.key) if p is not None]

    def _read_stamps(self):
        return [_stamp(p) for p in self._files()]

    def _load(self):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.check_hostname = self.server_name is not None
        ctx.load_verify_locations(cafile=self.ca)
        if self.cert is not None:
            ctx.load_cert_chain(self.cert, self.key)
        return ctx

    def context(self):
        """The ssl.SSLContext for a new connection: reloaded first if a file
        changed since the last check (at most once per CHECK_INTERVAL)."""
        now = time.monotonic()
        with self._mu:
            if now - self._checked < CHECK_INTERVAL:
                return self._ctx
            self._checked = now
            try:
                stamps = self._read_stamps()
                if stamps != self._stamps:
                    self._ctx = self._load()
                    self._stamps = stamps
                    log.info("chubby: TLS files reloaded (%s)", ", ".join(self._files()))
            except (OSError, ssl.SSLError, ValueError) as e:
                log.warning("chubby: TLS reload failed, keeping the previous files: %s", e)
            return self._ctx

    def wrap(self, sock, host):
        """Wrap a connected socket and complete the handshake (bounded by
        the socket's timeout)."""
        return self.context().wrap_socket(sock, server_hostname=self.server_name or host)

    def __repr__(self):
        return "<chubbycell.TLSConfig ca=%s cert=%s server_name=%s>" % (self.ca, self.cert, self.server_name)
