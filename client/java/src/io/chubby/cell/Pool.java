package io.chubby.cell;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;
import org.apache.thrift.TConfiguration;
import org.apache.thrift.TException;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.transport.TSocket;
import org.apache.thrift.transport.TTransport;
import org.apache.thrift.transport.TTransportException;
import org.apache.thrift.transport.layered.TFramedTransport;

/**
 * Connections to the replicas, pooled per address. A generated Thrift client
 * carries one call at a time, so every call borrows a connection (one
 * client per service on it, all sharing its protocol, as the cell serves
 * every service on one port) and gives it back when the reply has been read
 * completely; a connection that failed is closed, never reused, and the next
 * call makes a new one. Thread-safe.
 */
final class Pool {
    /** Idle connections kept per address. */
    static final int MAX_IDLE = 8;
    /** An idle connection older than this is closed rather than reused (the server may have dropped it). */
    static final long MAX_IDLE_NANOS = 30_000_000_000L;

    /** One call on a connection. */
    interface Rpc<T> {
        T call(Conn c) throws TException;
    }

    /** The connection could not be made: the request never left. */
    static final class Unsent extends Exception {
        private static final long serialVersionUID = 1L;

        Unsent(String addr, Throwable cause) {
            super("cannot connect to " + addr + ": " + cause.getMessage(), cause);
        }
    }

    /** The connection failed after the request was (perhaps) sent: its fate is unknown. */
    static final class Lost extends Exception {
        private static final long serialVersionUID = 1L;
        final boolean timeout;

        Lost(String addr, Throwable cause, boolean timeout) {
            super((timeout ? "no reply in time from " : "connection lost to ") + addr + ": " + cause.getMessage(), cause);
            this.timeout = timeout;
        }
    }

    /** A connection to one replica, with a client for each service. */
    static final class Conn {
        final String addr;
        final TSocket sock;
        final TTransport trans;
        final chubby.Session.Client session;
        final chubby.FileSystem.Client fs;
        final chubby.Lock.Client lock;
        final chubby.Cell.Client cell;
        final chubby.Oracle.Client oracle;
        final Socket raw; // the TCP socket under the transport (under TLS, if any)
        boolean reused; // handed out before: a failure may just mean the server dropped it while idle
        long idleSince;

        Conn(String addr, CellOptions o) throws TTransportException {
            this.addr = addr;
            if (o.tls == null) {
                sock = new TSocket(new TConfiguration(), Check.host(addr), Check.port(addr), o.callTimeoutMs(), o.connectTimeoutMs());
                sock.open();
                raw = sock.getSocket();
            } else {
                Socket[] under = new Socket[1];
                sock = new TSocket(tlsSocket(addr, o, under));
                raw = under[0];
                sock.setSocketTimeout(o.callTimeoutMs());
            }
            trans = o.transport == CellOptions.Transport.FRAMED ? new TFramedTransport(sock) : sock;
            if (!trans.isOpen()) {
                trans.open();
            }
            // Strict binary, as the cell speaks it.
            TBinaryProtocol proto = new TBinaryProtocol(trans, true, true);
            session = new chubby.Session.Client(proto);
            fs = new chubby.FileSystem.Client(proto);
            lock = new chubby.Lock.Client(proto);
            cell = new chubby.Cell.Client(proto);
            oracle = new chubby.Oracle.Client(proto);
        }

        void close() {
            trans.close();
        }

        /**
         * Closes the TCP socket under the connection, from any thread: a
         * read or write blocked on it fails at once (the transport's own
         * close is not safe beside a call in flight). The call's thread then
         * discards the connection.
         */
        void abort() {
            try {
                raw.close();
            } catch (IOException e) {
                // closed already: nothing more to do
            }
        }

        /** Invalidates every client session ctx keeps for resumption. */
        private static void forgetSessions(javax.net.ssl.SSLContext ctx) {
            javax.net.ssl.SSLSessionContext sc = ctx.getClientSessionContext();
            for (java.util.Enumeration<byte[]> ids = sc.getIds(); ids.hasMoreElements(); ) {
                javax.net.ssl.SSLSession s = sc.getSession(ids.nextElement());
                if (s != null) {
                    s.invalidate();
                }
            }
        }

        /**
         * A TLS 1.3 connection to addr, its handshake done: connect and
         * handshake are each bounded by the connect timeout.
         */
        private static Socket tlsSocket(String addr, CellOptions o, Socket[] under) throws TTransportException {
            String host = Check.host(addr);
            int port = Check.port(addr);
            Socket raw = new Socket();
            under[0] = raw;
            try {
                raw.setTcpNoDelay(true);
                raw.connect(new InetSocketAddress(host, port), o.connectTimeoutMs());
                raw.setSoTimeout(o.connectTimeoutMs());
                SSLSocket ssl = (SSLSocket) o.tls.getSocketFactory().createSocket(raw, host, port, true);
                SSLParameters p = ssl.getSSLParameters();
                p.setProtocols(new String[] {"TLSv1.3"});
                ssl.setSSLParameters(p);
                // No resumption: a resumed session would present the
                // certificate and trust the CA of its first handshake, not
                // the files' current ones (the Go client does not resume
                // either). A TLS 1.3 ticket may arrive after any handshake
                // and be cached, so the cache is emptied before each one.
                forgetSessions(o.tls);
                ssl.startHandshake();
                ssl.getSession().invalidate();
                return ssl;
            } catch (IOException | RuntimeException e) {
                try {
                    raw.close();
                } catch (IOException ignored) {
                    // closing what failed: nothing more to do
                }
                throw new TTransportException(TTransportException.NOT_OPEN,
                        "TLS to " + addr + ": " + e.getMessage(), e);
            }
        }
    }

    private final CellOptions opts;
    private final Map<String, ArrayDeque<Conn>> idle = new HashMap<>();
    private final Set<Conn> busy = ConcurrentHashMap.newKeySet();
    private boolean closed;

    Pool(CellOptions opts) {
        this.opts = opts;
    }

    /**
     * Runs fn on a connection to addr with a read timeout of timeoutMs. fresh
     * asks for a new connection (for calls that must not be resent after
     * they may have left: a failure on a reused connection could then be a
     * connection the server had dropped, and the call could not be resent).
     * A reused connection that fails other than by a timeout is replaced by
     * a new one and the call sent once more on it (the server may have
     * dropped the connection while it was idle); only calls that may be
     * resent (fresh false) reuse connections.
     *
     * @throws chubby.ChubbyError the cell's refusal (the connection is fine and kept)
     * @throws Unsent no connection could be made
     * @throws Lost the connection failed after sending
     * @throws TException a protocol error (the connection is closed)
     */
    <T> T invoke(String addr, boolean fresh, int timeoutMs, Rpc<T> fn) throws TException, Unsent, Lost {
        for (int tries = 0; ; tries++) {
            Conn c = get(addr, fresh || tries > 0);
            Scope sc = Scope.current();
            if (sc != null && !sc.enter(c)) { // a scope that fires aborts c: the call is abandoned
                sc.leave(c);
                discard(c);
                throw new Unsent(addr, new IllegalStateException("the call was abandoned"));
            }
            try {
                c.sock.setSocketTimeout(timeoutMs);
                T v = fn.call(c);
                put(c);
                return v;
            } catch (chubby.ChubbyError e) {
                put(c); // a whole reply was read: the connection is in step
                throw e;
            } catch (TTransportException e) {
                discard(c);
                boolean timeout = isTimeout(e);
                boolean abandoned = sc != null && sc.firedKind() != null;
                if (c.reused && !timeout && tries == 0 && !isClosed() && !abandoned) {
                    purge(addr); // its siblings are likely stale too
                    continue;
                }
                throw new Lost(addr, e, timeout);
            } catch (TException | RuntimeException e) {
                discard(c);
                if (sc != null && sc.firedKind() != null) {
                    throw new Lost(addr, e, false); // the abort's echo: the caller reports the scope's error
                }
                throw e;
            } finally {
                if (sc != null) {
                    sc.leave(c);
                }
            }
        }
    }

    static boolean isTimeout(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof SocketTimeoutException) {
                return true;
            }
            if (t instanceof TTransportException && ((TTransportException) t).getType() == TTransportException.TIMED_OUT) {
                return true;
            }
        }
        return false;
    }

    private Conn get(String addr, boolean fresh) throws Unsent {
        synchronized (this) {
            if (closed) {
                throw new Unsent(addr, new IllegalStateException("client closed"));
            }
            ArrayDeque<Conn> q = idle.get(addr);
            long now = System.nanoTime();
            while (!fresh && q != null && !q.isEmpty()) {
                Conn c = q.pollLast(); // the most recently used: the least likely to be stale
                if (now - c.idleSince > MAX_IDLE_NANOS) {
                    c.close();
                    continue;
                }
                c.reused = true;
                busy.add(c);
                return c;
            }
        }
        Conn c;
        try {
            c = new Conn(addr, opts);
        } catch (TTransportException | RuntimeException e) {
            throw new Unsent(addr, e);
        }
        synchronized (this) {
            if (closed) {
                c.close();
                throw new Unsent(addr, new IllegalStateException("client closed"));
            }
            busy.add(c);
        }
        return c;
    }

    private synchronized void put(Conn c) {
        busy.remove(c);
        ArrayDeque<Conn> q = idle.computeIfAbsent(c.addr, k -> new ArrayDeque<>());
        if (closed || q.size() >= MAX_IDLE) {
            c.close();
            return;
        }
        c.idleSince = System.nanoTime();
        q.addLast(c);
    }

    /** Closes a connection that failed or was abandoned. */
    void discard(Conn c) {
        busy.remove(c);
        c.close();
    }

    /** Closes the idle connections to addr (it failed: they are likely dead too). */
    synchronized void purge(String addr) {
        ArrayDeque<Conn> q = idle.remove(addr);
        if (q != null) {
            for (Conn c : q) {
                c.close();
            }
        }
    }

    synchronized boolean isClosed() {
        return closed;
    }

    /** Closes every connection, idle and busy (calls in flight fail at once); no new ones are made. */
    void close() {
        synchronized (this) {
            closed = true;
            for (ArrayDeque<Conn> q : idle.values()) {
                for (Conn c : q) {
                    c.close();
                }
            }
            idle.clear();
        }
        for (Iterator<Conn> it = busy.iterator(); it.hasNext(); ) {
            it.next().close();
            it.remove();
        }
    }
}
