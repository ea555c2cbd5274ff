// Package rpc is a small ICE-style layer on Kitex for Thrift services:
// asynchronous calls (AMI), deferred replies (AMD), and the construction of
// servers and clients with limits, deadlines, metrics and logging chosen
// once for the whole project. It knows nothing of the lock service and
// imports none of its generated code; its tests use a tiny Echo service.
//
// # AMI: futures
//
// [Go] runs any blocking call, typically a method of a generated Kitex
// client, on its own goroutine and returns a [Future]. A future is waited
// on with [Future.Wait] (bounded by a context, which ends the wait but not
// the call), observed with [Future.Then] callbacks, selected on with
// [Future.Done], or peeked at with [Future.Result]. [NewPromise] makes a
// future that some other code completes; the first completion wins.
//
// # AMD: deferred replies
//
// A handler that cannot answer yet (a KeepAlive waiting for the lease to
// need renewing, an Acquire waiting for a lock) creates a [Deferred], hands
// it to the logic that will answer, and parks on it:
//
//	func (h *handler) KeepAlive(ctx context.Context, req *Req) (*Resp, error) {
//		d := rpc.NewDeferred[*Resp]()
//		h.table.Add(req.Session, d)
//		d.OnAbandon(func(error) { h.table.Remove(req.Session, d) })
//		return d.Park(ctx, leaseLeft(req.Session))
//	}
//
// Another goroutine answers with [Deferred.Resolve] or [Deferred.Reject].
// Park also returns, abandoning the deferred, when its bound elapses
// ([ErrBoundExceeded]), when the handler's context ends (the caller's
// deadline, sent by TTHeader clients), or when the caller's connection
// closes ([ErrCallerGone]). Exactly one outcome wins; the loser learns it
// from a false return or from OnAbandon.
//
// The bound is mandatory. Kitex does not cancel a handler's context when a
// plain client (framed or buffered Thrift, no TTHeader) gives up, and a Go
// Kitex client that gives up through its context keeps reading the
// connection in the background, so neither case is visible to the server;
// only the bound ends such a call.
//
// # Detecting a caller that went away
//
// Kitex's unary server does not report a closed connection to a running
// handler: it runs a connection's close callbacks only after the handler
// returns, and meanwhile the socket sits in CLOSE-WAIT. netpoll, its
// default transport, does see the hang-up (EPOLLRDHUP) while the handler
// runs and offers an OnDisconnect callback that runs concurrently with it
// (Kitex's TTHeader streaming server uses it; the unary server does not).
// [ServerOptions] installs an inbound handler that gives every connection a
// cancellable context, the parent of all its handlers' contexts, and
// cancels it with cause [ErrCallerGone] from OnDisconnect. So on the
// default transport a parked call ends within a millisecond or two of its
// caller closing the connection (a Kitex client does when its RPC timeout
// fires), and any handler can check context.Cause(ctx). On other
// transports (gonet, used for TLS) there is no such signal and only the
// deadline and the bound end a parked call.
//
// # Servers and clients
//
// [ServerOptions] and [ClientOptions] turn a [ServerConfig] and a
// [ClientConfig] into Kitex options for generated NewServer and NewClient
// functions. Servers cap connections (default [DefaultMaxConnections],
// well below this machine's 20,000 descriptors per process) and optionally
// calls per second, read TTHeader metadata so callers' deadlines reach
// handlers (the server middleware derives the deadline context and
// cancels it when the handler returns; Kitex's WithEnableContextTimeout
// would keep it and its timer alive for the caller's whole timeout after
// every successful call), still serve plain framed and buffered Thrift
// clients on the same port, recover panics, and export Prometheus metrics.
// Clients speak TTHeader by default, dial with a [DefaultConnectTimeout]
// timeout, and cap calls in flight (each holds a connection with Kitex's
// default pool).
//
// # Connection slots
//
// One host must not be able to take every connection slot. A server caps
// the open connections of each remote IP address
// ([DefaultMaxConnectionsPerIP]; [ServerConfig.ConnLimits] gives
// named prefixes more, or less: a proxy, a NAT gateway) and resets a
// connection over the cap as it accepts it, before Kitex or netpoll spend
// anything on it; loopback addresses have no such cap by default
// ([DefaultConnLimits]: a dev cell's replicas, tests and benchmarks all
// connect from 127.0.0.1). And it closes connections that carry no call:
// one that has carried none within [DefaultFirstCallTimeout] of
// being accepted, and one that carries none now and has received nothing
// for [DefaultMaxConnIdleTime]. A call in progress keeps its
// connection, however long it is parked. Kitex's own MaxConnIdleTime
// does not do this: on netpoll it only turns on TCP keepalive, which a
// live peer answers for ever (16,000 connections that never sent a byte
// held all 15,000 slots for the 150 s they were watched); on gonet it is
// at least 2 minutes. See conns.go.
//
// Servers run on Kitex's netpoll transport, but with a listener of this
// package in place of netpoll's own: on Stop, netpoll's closes the number
// of its duplicate of the listening descriptor twice and, about 100 ms
// later, netpoll removes that number from its epoll set and closes it a
// third time, when it usually belongs to a file or connection opened
// meanwhile. Ours closes each descriptor once and keeps the number taken
// (by /dev/null) until netpoll is done with it (Linux only).
//
// Kitex and netpoll log through process-wide loggers; main should route
// them to slog, rate-limited, with [InstallProcessLoggers]. When a process
// runs out of descriptors netpoll logs a failed accept every few
// milliseconds; unlimited, that was gigabytes in a minute on this machine.
//
// # Cost of a parked call
//
// Measured by TestTenThousandParkedCalls (10,000 calls parked at once on
// one server, the client in a child process, no race detector, 2 vCPU):
// about 25 KiB of server memory per parked call, of which about 17 KB heap
// (9 KB netpoll connection buffers, the rest Kitex's per-connection and
// per-call state, the Deferred and its timer) and 8 KB for the handler's
// goroutine stack; one goroutine and one file descriptor on each side per
// call. netpoll.Configure with a BufferSize of 1 KiB brings it to about
// 21 KiB. 100,000 parked calls would need 100,000 connections, which one
// process here cannot hold: that is why one KeepAlive carries many sessions.
// See README.md in this directory for all measured numbers.
package rpc
