// Package client is the Go client library of a Chubby lock cell (see
// DESIGN.md §4): it connects to a cell, keeps sessions alive, opens handles
// to nodes, reads and writes their small contents and takes their advisory
// locks.
//
// # Shape
//
//   - A [Client] reaches one cell ([Connect]; addresses from [Config.Addrs],
//     else CHUBBY_CELL, else 127.0.0.1:7000). Calls that need no session
//     live on it: [Client.Status], [Client.GetMaster], [Client.CheckSequencer].
//   - A [Session] ([Client.NewSession]) holds locks, owns ephemeral nodes and
//     opens handles. A goroutine keeps it alive: it sends one KeepAlive at a
//     time, which the master parks until shortly before the lease would end;
//     the local lease is conservative (send time of the request + the lease
//     granted). The session ends when it is closed, when the cell says
//     SESSION_EXPIRED, or when the local lease runs out with no reply;
//     [Session.Done] and [Session.Err] tell. (Jeopardy and the grace period
//     of Chubby come later; today a lease that runs out expires the session.)
//   - A [Handle] ([Session.Open]) names one instance of one node; it fails
//     with HANDLE_INVALID once the node is deleted or re-created.
//
// # Blocking and asynchronous calls
//
// Every call comes in two forms: X(ctx, ...) blocks, and XAsync(ctx, ...)
// returns an [rpc.Future] at once (Wait, Then, Done, Result). The call runs
// under ctx in both forms; the blocking form reports exactly what the call
// did (it does not stop waiting before the call returns, which ctx bounds).
//
// # Errors
//
// A refused call returns an [*OpError] (operation, path) wrapping the cell's
// [*chubby.ChubbyError]; use [Code] or [IsCode] to test the code and
// [Describe] for a human-readable reason. The library's own conditions are
// [ErrSessionExpired] (which [Code] reports as SESSION_EXPIRED),
// [ErrSessionClosed], [ErrClientClosed] and [ErrUnreachable]; test them with
// errors.Is.
//
// # Retries
//
// Calls go to the replica believed to be master; NOT_MASTER's hint (or the
// next configured address) redirects them. A call is sent again, at most 5
// times with a backoff of 50 ms doubling to 1 s, only when that is safe:
// reads (GetContentsAndStat, GetStat, ReadDir, GetSequencer, CheckSequencer,
// GetMaster, GetStatus) and CreateSession on NOT_MASTER, UNAVAILABLE and
// transport errors other than timeouts; calls that change the cell only when
// the request certainly did nothing (NOT_MASTER, or no connection could be
// made). Timeouts and lost replies of writes are reported, never retried.
//
// # Sequencers
//
// A lock's sequencer has a printable form,
// chubby-seq:v1:<E|S>:<lock_generation>:<instance>:<path>
// ([FormatSequencer], [ParseSequencer]), for passing it to the servers a
// lock holder talks to; they check it with [Client.CheckSequencer].
//
// # Logging
//
// The library logs to [Config.Logger] (silent by default). Kitex logs
// through its own process-wide logger (package klog); a program can route it
// with klog.SetLogger(rpc.NewKitexLogger(logger)).
//
// # Example
//
//	ctx := context.Background()
//	c, err := client.Connect(ctx, client.Config{}) // CHUBBY_CELL or 127.0.0.1:7000
//	if err != nil {
//		return err
//	}
//	defer c.Close()
//	s, err := c.NewSession(ctx)
//	if err != nil {
//		return err
//	}
//	defer s.Close(ctx)
//
//	h, err := s.Open(ctx, "/service/leader", client.OpenOptions{
//		Mode:   chubby.OpenMode_READ_WRITE,
//		Create: chubby.CreateMode_OPEN_OR_CREATE,
//	})
//	if err != nil {
//		return err
//	}
//	seq, err := h.Acquire(ctx, chubby.LockMode_EXCLUSIVE, time.Minute, client.LockOptions{})
//	if client.IsCode(err, chubby.ErrorCode_TIMED_OUT) {
//		return errors.New("someone else leads")
//	} else if err != nil {
//		return err
//	}
//	// We lead: say where, and fence our writes with the sequencer.
//	if _, err := h.SetContents(ctx, []byte("10.0.0.7:8080")); err != nil {
//		return err
//	}
//	token := client.FormatSequencer(seq) // pass along; receivers call CheckSequencer
//	_ = token
//
//	// Asynchronously: start reads, collect them later.
//	f := h.GetContentsAndStatAsync(ctx)
//	r, err := f.Wait(ctx)
//	_ = r
//
//	select {
//	case <-s.Done(): // session lost: the lock may be someone else's now
//		return s.Err()
//	default:
//	}
//	return h.Release(ctx)
package client
