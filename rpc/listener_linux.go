package rpc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/cloudwego/kitex/pkg/remote"
	knetpoll "github.com/cloudwego/kitex/pkg/remote/trans/netpoll"
	"golang.org/x/sys/unix"
)

// Why this file exists: Kitex's netpoll transport serves a listener through
// netpoll.ConvertListener, which duplicates the listener's descriptor and
// keeps the duplicate's number. Stopping the server closes that number
// twice at once (the listener's Close does syscall.Close(fd) and then closes
// the *os.File holding the same fd), and about 100 ms later (Kitex sleeps
// between closing the listener and shutting the event loop down) netpoll's
// server detaches the number from its epoll set and calls Close again,
// closing it a third time. Linux hands out the lowest free number, so by
// then the number usually belongs to a file or connection opened meanwhile:
// it is unregistered from netpoll's epoll (a netpoll connection then hangs)
// and closed under its owner.
//
// A listener that already is a netpoll.Listener is served as is. The
// transport here gives netpoll such a listener: it closes each descriptor
// once, and from its Close until the event loop is shut down it keeps the
// number taken by a descriptor of /dev/null, so that nothing the process
// opens meanwhile can get it.

// acceptGuarded: the netpoll transport's listener takes a per-address
// slot for every connection it accepts (connGuard.admit), which
// connWatcher.OnInactive frees.
const acceptGuarded = true

// transServerFactory makes Kitex's netpoll transport servers that serve a
// pollListener instead of netpoll's own listener.
type transServerFactory struct {
	guard *connGuard // admits accepted connections
	lc    *lifecycle // told when Kitex hands over the listener
}

func (f transServerFactory) NewTransServer(opt *remote.ServerOption, h remote.ServerTransHandler) remote.TransServer {
	return &transServer{TransServer: knetpoll.NewTransServerFactory().NewTransServer(opt, h), guard: f.guard, lc: f.lc}
}

// transServer is Kitex's netpoll transport server with the listener
// replaced. It frees the listener's descriptor number once both the
// transport's Shutdown (which ends with netpoll's detach and last Close)
// and its BootstrapServer have returned: if Stop comes before the event loop
// serves the listener, netpoll may still register the number, and it stays
// reserved then.
type transServer struct {
	remote.TransServer
	guard *connGuard
	lc    *lifecycle

	mu               sync.Mutex
	ln               *pollListener
	served, shutdown bool // BootstrapServer, Shutdown returned
}

func (s *transServer) BootstrapServer(ln net.Listener) error {
	pl, err := newPollListener(ln)
	if err != nil {
		return err
	}
	pl.admit = s.guard.admit
	pl.served = s.lc.boot
	s.mu.Lock()
	if s.shutdown {
		// Stopped before serving: Kitex's transport would serve for ever.
		s.mu.Unlock()
		pl.Close()
		pl.release()
		return errors.New("rpc: server stopped before it served")
	}
	s.ln = pl
	s.mu.Unlock()
	err = s.TransServer.BootstrapServer(pl)
	s.mu.Lock()
	s.served = true
	release := s.shutdown
	s.mu.Unlock()
	if release {
		pl.release()
	}
	return err
}

func (s *transServer) Shutdown() error {
	err := s.TransServer.Shutdown()
	s.mu.Lock()
	s.shutdown = true
	pl, release := s.ln, s.served
	s.mu.Unlock()
	if pl != nil && release {
		pl.release()
	}
	return err
}

// checkListener reports whether ln can be served: it must have a socket
// descriptor (a *net.TCPListener or *net.UnixListener).
func checkListener(ln net.Listener) error {
	if _, ok := ln.(syscall.Conn); !ok {
		return fmt.Errorf("rpc: cannot serve a %T: it has no socket descriptor", ln)
	}
	return nil
}

// pollListener is a netpoll.Listener (a net.Listener with Fd) over a
// duplicate of a listener's descriptor. netpoll registers Fd with its
// poller, calls Accept when it is readable, and calls Close on shutdown,
// once when Kitex stops listening and again after detaching Fd.
//
// Close stops listening at once (the original listener is closed and a
// descriptor of /dev/null replaces the duplicate under the same number, in
// one dup3) but keeps the number; release, called once netpoll is done
// with it, closes the placeholder and so frees the number.
type pollListener struct {
	ln    net.Listener
	addr  net.Addr
	fd    int
	tcp   bool
	admit func(remote net.Addr) bool // nil: every connection
	// served, if set, is called when netpoll reads Fd: its event loop
	// exists then and serves the listener, so Kitex's Shutdown stops it.
	// (A Shutdown before that finds no event loop and does nothing, and
	// netpoll goes on to serve for ever.)
	served func()

	mu       sync.Mutex // held while accepting, so Close never races a live accept
	closed   bool
	released bool
}

func newPollListener(ln net.Listener) (*pollListener, error) {
	if err := checkListener(ln); err != nil {
		return nil, err
	}
	rc, err := ln.(syscall.Conn).SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	var dupErr error
	if err := rc.Control(func(s uintptr) { fd, dupErr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if dupErr != nil {
		return nil, fmt.Errorf("rpc: duplicate listener descriptor: %w", dupErr)
	}
	// The socket is non-blocking already (Go made it so, and the flag
	// belongs to the socket, not the descriptor); netpoll needs it so.
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	_, tcp := ln.Addr().(*net.TCPAddr)
	return &pollListener{ln: ln, addr: ln.Addr(), fd: fd, tcp: tcp}, nil
}

// Fd is the descriptor netpoll polls. netpoll reads it once, when it
// starts serving.
func (l *pollListener) Fd() int {
	if l.served != nil {
		l.served()
	}
	return l.fd
}

func (l *pollListener) Addr() net.Addr { return l.addr }

// refusalsPerAccept bounds the connections one Accept refuses before it
// returns to netpoll's poller (which calls it again while more wait).
const refusalsPerAccept = 64

// Accept accepts one connection without blocking, as netpoll expects: it
// returns nil and no error when there is none to accept (netpoll polls
// again). A connection admit refuses is closed at once, with a reset, and
// the next one is taken. After Close it returns net.ErrClosed, on which
// netpoll detaches the listener and ends its event loop.
func (l *pollListener) Accept() (net.Conn, error) {
	for range refusalsPerAccept {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return nil, net.ErrClosed
		}
		nfd, sa, err := unix.Accept4(l.fd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		l.mu.Unlock()
		switch {
		case err == unix.EAGAIN || err == unix.EINTR || err == unix.ECONNABORTED:
			return nil, nil
		case err != nil:
			return nil, os.NewSyscallError("accept4", err)
		}
		remote := sockaddrAddr(sa, l.tcp)
		if l.admit != nil && !l.admit(remote) {
			// A reset: the caller learns at once, and the server keeps no
			// TIME_WAIT state for it.
			unix.SetsockoptLinger(nfd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
			unix.Close(nfd)
			continue
		}
		if l.tcp {
			// netpoll sets TCP_NODELAY on the connections its own listener
			// accepts; keep that.
			unix.SetsockoptInt(nfd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		}
		return &acceptedConn{fd: nfd, local: l.addr, remote: remote}, nil
	}
	return nil, nil
}

// Close stops listening; it may be called any number of times. The
// descriptor number stays reserved until release.
func (l *pollListener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	// Without a placeholder the duplicate stays open, and the socket keeps
	// listening (Accept refuses, connections wait in the backlog) until
	// release closes it.
	if ph, err := placeholder(); err == nil {
		unix.Dup3(ph, l.fd, unix.O_CLOEXEC)
	}
	return l.ln.Close()
}

// release closes the listener and frees its descriptor number. netpoll
// must be done with the number: its event loop detached it (or never
// registered it).
func (l *pollListener) release() {
	l.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.released {
		l.released = true
		unix.Close(l.fd)
	}
}

// placeholder is a descriptor of /dev/null, opened on first use and kept
// for the life of the process, that pollListener.Close puts on a
// listener's number to keep it taken.
var placeholder = sync.OnceValues(func() (int, error) {
	return unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
})

// acceptedConn is an accepted socket handed to netpoll, which takes it
// over: netpoll keeps its descriptor and addresses (netpoll.Conn's Fd,
// LocalAddr and RemoteAddr) and calls none of its other methods. Those
// fail, so that the descriptor has one owner.
type acceptedConn struct {
	fd            int
	local, remote net.Addr
}

var errHandedOver = errors.New("rpc: accepted connection belongs to netpoll")

func (c *acceptedConn) Fd() int                          { return c.fd }
func (c *acceptedConn) LocalAddr() net.Addr              { return c.local }
func (c *acceptedConn) RemoteAddr() net.Addr             { return c.remote }
func (c *acceptedConn) Read([]byte) (int, error)         { return 0, errHandedOver }
func (c *acceptedConn) Write([]byte) (int, error)        { return 0, errHandedOver }
func (c *acceptedConn) Close() error                     { return errHandedOver }
func (c *acceptedConn) SetDeadline(time.Time) error      { return errHandedOver }
func (c *acceptedConn) SetReadDeadline(time.Time) error  { return errHandedOver }
func (c *acceptedConn) SetWriteDeadline(time.Time) error { return errHandedOver }

// sockaddrAddr converts an accepted peer's address.
func sockaddrAddr(sa unix.Sockaddr, tcp bool) net.Addr {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: net.IPv4(sa.Addr[0], sa.Addr[1], sa.Addr[2], sa.Addr[3]), Port: sa.Port}
	case *unix.SockaddrInet6:
		a := &net.TCPAddr{IP: append(net.IP(nil), sa.Addr[:]...), Port: sa.Port}
		if sa.ZoneId != 0 {
			a.Zone = strconv.Itoa(int(sa.ZoneId))
		}
		return a
	case *unix.SockaddrUnix:
		return &net.UnixAddr{Name: sa.Name, Net: "unix"}
	}
	if tcp {
		return &net.TCPAddr{}
	}
	return &net.UnixAddr{Net: "unix"}
}
