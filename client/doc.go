// Package client is the Go client library of a Chubby lock cell: it
// connects to a cell, keeps sessions alive, opens handles to nodes, reads
// and writes their small contents and takes their advisory locks.
//
// # Shape
//
//   - A [Client] reaches one cell ([Connect]; addresses from [Config.Addrs],
//     else CHUBBY_CELL, else [DefaultAddr]). Calls that need no session
//     live on it: [Client.Status], [Client.GetMaster], [Client.CheckSequencer],
//     [Client.WhoAmI], [Client.Timestamps] (the cell's timestamp oracle),
//     [Client.RemoveMember], [Client.SnapshotRead] (a backup: package cell/backup).
//   - A [Session] ([Client.NewSession]) holds locks, owns ephemeral nodes and
//     opens handles. A goroutine keeps it alive: it sends one KeepAlive at a
//     time, which the master parks until shortly before the lease would end;
//     the local lease is conservative (send time of the request + the lease
//     granted). When that lease runs out the session is in jeopardy, and
//     after a grace period with no master it expires (see below).
//     [Session.State], [Session.Events], [Session.Done] and [Session.Err]
//     tell where it is.
//   - A [Handle] ([Session.Open]) names one instance of one node; it fails
//     with HANDLE_INVALID once the node is deleted or re-created. Its
//     [Handle.Events] delivers the events [OpenOptions.EventMask] asked for.
//
// # Blocking and asynchronous calls
//
// Every call but [Client.SnapshotRead], [Client.Timestamps] and
// [Client.Timestamp] comes in two forms: X(ctx, ...) blocks, and
// XAsync(ctx, ...) returns an [rpc.Future] at once (Wait, Then, Done, Result). The call runs
// under ctx in both forms; the blocking form reports exactly what the call
// did (it does not stop waiting before the call returns, which ctx bounds).
// The blocking form of a session's or handle's call runs on the caller's
// goroutine; only the asynchronous form starts one.
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
// # Sessions: safe, jeopardy, expired
//
// A session is in one of four states ([SessionState]):
//
//	       local lease ran out             grace period ran out
//	SAFE ────────────────────▶ JEOPARDY ─────────────────────▶ EXPIRED
//	 ▲                            │
//	 └────── KeepAlive reply ─────┘
//
//	SAFE or JEOPARDY ── the cell says SESSION_EXPIRED ──▶ EXPIRED
//	SAFE or JEOPARDY ── Session.Close, Client.Close ────▶ CLOSED
//
// In words:
//
//   - Safe: the local lease has not run out, so the master counts the
//     session alive and its locks are held. Calls go out at once.
//   - Jeopardy: the local lease ran out with no KeepAlive reply (the master
//     died, the cell is failing over, or the network is cut). The session
//     may still be alive at the master, or may not: a lock holder should
//     stop acting on its locks until the session is safe again. The
//     KeepAlive loop keeps trying for [Config.GracePeriod] (default
//     [DefaultGracePeriod], counted from the end of the local lease): it follows NOT_MASTER hints,
//     and, while it waits for a reply, every 0.5 s asks every configured
//     replica where the master is (GetMaster) and moves its KeepAlive there
//     — or, when they name the replica it went to and it has been
//     unanswered for 0.5 s, sends it again (it or its reply is lost: a
//     master answers a parked KeepAlive before the local lease ends). The
//     rules are package client/keepalive's, which the simulator runs too.
//     The cache is flushed and not used (see Cache). A KeepAlive reply makes the
//     session safe again with every handle, lock and ephemeral node it had
//     (the new master gave it a full lease to come back). Calls made in
//     jeopardy wait, bounded by their context, until the session is safe
//     (then they are sent) or expired (then they fail with SESSION_EXPIRED),
//     as Chubby's calls block in jeopardy. [Session.Close] does not wait.
//   - Expired: the grace period ran out, or the cell answered a KeepAlive or
//     any call with SESSION_EXPIRED (at once, in either live state). Every
//     handle is invalid and every call fails with SESSION_EXPIRED ([Code]
//     reports [ErrSessionExpired] so); [Session.Done] is closed.
//   - Closed: ended by [Session.Close] or [Client.Close]; calls fail with
//     [ErrSessionClosed] or [ErrClientClosed].
//
// [Session.Events] delivers [EventJeopardy], [EventSafe],
// [EventMasterChanged] (the cell failed over: a reply for the session named
// a higher master epoch, or the new master said MASTER_FAILED_OVER; once
// per epoch; when a new master ends a jeopardy, it comes before the
// EventSafe), [EventLostEvents] (see below) and finally [EventExpired], in
// order, and is closed when the session ends. The channel holds
// [SessionEventBuffer] events; an application that does not read
// loses the oldest undelivered ones, never the newest, and the KeepAlive
// loop never waits for it. [Session.State] is exact at every moment, even
// before the event is read.
//
// # Events
//
// A handle asks for events when it is opened: [OpenOptions.EventMask] is
// an OR of chubby.EVENT_MASK_* bits (FILE_CONTENTS_MODIFIED, CHILD_ADDED,
// CHILD_REMOVED, CHILD_MODIFIED, LOCK_ACQUIRED, CONFLICTING_LOCK_REQUEST,
// HANDLE_INVALID; chubby.EVENT_MASK_ALL for all). [Handle.Events] then
// delivers them as [Event] values, in the order the cell applied the
// changes:
//
//	h, err := s.Open(ctx, "/services/db", client.OpenOptions{
//		EventMask: chubby.EVENT_MASK_CHILD_ADDED | chubby.EVENT_MASK_CHILD_REMOVED})
//	for ev := range h.Events() { // ends when h is closed or the session ends
//		log.Printf("%v %s", ev.Kind, ev.Child)
//	}
//
// The cell queues events when it applies a change, as replicated state, and
// sends them on KeepAlive replies (a parked KeepAlive is answered as soon
// as there is one); the next KeepAlive acknowledges them. So they survive a
// failover: a new master delivers what the old one had not, and may send
// again what it had; the library delivers each event once, in order (by
// its per-session number, [Event.Seq]), whatever the cell sends twice.
// An event that arrives before its Open's reply is kept (up to 1024 per
// session) until Open returns. The channel is closed after HANDLE_INVALID
// (the node was deleted: nothing follows), by [Handle.Close] and when the
// session ends; a handle opened without a mask has a closed channel.
//
// Two kinds of loss are possible, both reported. The cell keeps at most
// fs.Limits.MaxEventsPerSession unacknowledged events per session (the
// library acknowledges on
// every KeepAlive, so only a client cut off for long, or a burst, reaches
// it): it then replaces the oldest with one EVENTS_LOST, which the library
// delivers to every handle with a mask ([Event.LostFrom]..[Event.Seq]) and
// as [EventLostEvents] on the session. And each handle's channel holds
// [HandleEventBuffer] events: an application that does not read
// loses the oldest, as with session events ([Handle.DroppedEvents] counts
// them). After either, re-read what you watch.
//
// # Cache
//
// Each session caches file contents, Stats and directory listings (on by
// default; [Config.DisableCache] turns it off, [Config.CacheMaxEntries]
// bounds it). [Handle.GetContentsAndStat], [Handle.GetStat] (of a file: a
// miss reads content and Stat in one call) and [Handle.ReadDir] answer from
// it without a call when it holds the node; [Session.CacheStats] and
// [Client.CacheStats] count hits and misses ([CacheStats.HitRate]).
//
// A cached read is never stale. The cell registers the session
// as a cacher of each node it lets it cache (the reply says cacheable),
// and before a change to the node commits it sends the session an
// invalidation on its KeepAlive (a parked one is answered at once) and
// waits until the next KeepAlive acknowledges it — or until the session's
// lease has run out, by which time the client has stopped using its cache
// (jeopardy). While a change is in progress the node is uncachable. The
// library drops what an invalidation names before it acknowledges it and
// before it extends its lease, and does not cache a reply if an
// invalidation arrived while the read was in flight.
//
// The cache is used only while the session is safe. It is flushed in
// jeopardy, when the session ends, and when the master changes (a new
// epoch, MASTER_FAILED_OVER): the new master knows no cachers, so it asks
// every caching session to flush and holds every change until each has
// acknowledged or its lease has run out. Handles survive a failover (they
// are replicated state); each carries its node's instance number, which
// the cell checks on the next read, so a handle to a node deleted or
// re-created meanwhile fails with HANDLE_INVALID rather than reading the
// new node. A session's own writes (SetContents, Delete) drop its copy at
// once; the next read fetches and caches the new value.
//
// The cached Stat is the one read; only its lock-delay remaining is aged
// locally. A node is cached per path and instance: a cached entry of a
// re-created node is never served to a handle of the old one.
//
// # Listing directories
//
// [Handle.ReadDir] returns every child of a directory, however many (the
// cell allows fs.Limits.MaxChildren per directory): the cell answers in
// pages (at most MAX_READDIR_ENTRIES, and a bounded number of bytes each),
// and
// ReadDir asks page after page, each after the last name of the one
// before. The set of names is one snapshot: every page carries the
// directory's content generation, which each child added or removed
// bumps, and when it differs between pages the listing starts again, at
// most 8 attempts, then [ErrDirChanging]. Each entry's Stat is as of its
// own page. Only a listing that fits one page is cached. The Python and
// Java clients page the same way (UNAVAILABLE after 8 attempts).
//
// # Poison
//
// [Handle.Poison] fails every call in flight on the handle, and every
// later call but Close, with [ErrPoisoned], without closing it (Chubby's
// Poison): a program can unblock threads waiting on a handle (an Acquire,
// say) before it closes the handle. It is local to the client; a call the
// cell had already received may still take effect.
//
// # Finding the master, and retries
//
// Calls go to the replica believed to be master. A NOT_MASTER answer with a
// hint (the master's address) moves them there. NOT_MASTER without a hint or
// a replica that cannot be reached moves them to the next known replica
// and, with several replicas known, starts a locate round: every known
// replica is asked GetMaster at once (each bounded by the connect timeout
// plus 1 s), and the answer with the highest epoch wins. Concurrent calls
// and sessions share one round.
//
// A master that falls silent (paused, cut off) refuses nothing, so a client
// with a session also keeps a master watch: one GetMaster parked at a
// replica that is not its master, naming the master, which that replica
// answers as soon as it knows another one (held up to 15 s, then renewed;
// GetMasterRequest.wait_ms). When the watch, a locate round or a session's
// reply names a master of a newer epoch elsewhere, the client goes there at
// once: every call in flight at another replica that may be resent is
// cancelled and sent again to the new master (a parked Acquire too: it
// carries a request number, so the cell queues it once and it waits what is
// left of its wait), and every session's KeepAlive is resent there. So
// sessions reach a new master within milliseconds of the view change,
// rather than when their local leases run out. The watch costs the cell one
// parked call per client, at a replica that is not the master.
//
// The known replicas ([Client.Replicas]) follow the cell's configuration,
// so Config.Addrs (or CHUBBY_CELL) may name a single replica: the client
// finds the others, follows replicas added later and stops asking replicas
// removed. They start as the configured addresses; every GetMaster answer
// that names the configuration's members (the best answer of a locate
// round, [Client.GetMaster], and one GetMaster to the master every 30 s
// while the client is used) replaces them, keeping also the replica that
// answered and the master it named. At most [MaxReplicas] are kept, each
// a well-formed host:port, so a broken replica cannot make the client ask
// more. The configured addresses remain the fallback: a locate round in
// which no known replica named a master (none answered, or all refused, as
// replicas removed from the cell do) asks the configured ones it did not
// ask.
//
// A call is sent again, at most 6 times with a backoff of 50 ms doubling to
// 1 s (about 1.5 s of pauses), only when that is safe; when the failure
// named the master elsewhere (a NOT_MASTER hint, or a locate round that
// found it) the next attempt goes there at once, twice per call at most.
// Replicas in a view change hold GetMaster, KeepAlive and refusals until
// they know the new master (at most 200 ms), so a client learns of a new
// master as soon as it exists rather than at its next back-off step. A
// NOT_MASTER hint naming the replica the client has just failed to reach is
// not followed (the replica that gave it has not noticed the failure yet):
// a locate round is asked instead, and a replica that refused a call and
// that a round then names master is gone to at once. A pause counts from
// the failure (the locate round is part of it, not added to it), and ends
// early when any locate round — the call's, another call's, a session's
// KeepAlive loop's — names a master other than the replica the call failed
// at. The KeepAlive loop likewise waits for the locate round after such a
// failure and goes at once to a master a round finds, rather than wait out
// its own back-off (up to 0.5 s): a new master holds every change until
// each caching session it recovered has flushed on a KeepAlive (see Cache),
// so a late KeepAlive would hold up the session's own writes and every
// other client's. The calls are sent again:
//
//   - reads (GetContentsAndStat, GetStat, ReadDir, GetSequencer,
//     CheckSequencer, GetMaster, GetStatus, WhoAmI, SnapshotRead),
//     GetTimestamps and CreateSession, on NOT_MASTER, UNAVAILABLE and
//     transport errors other than timeouts;
//   - calls that change the cell and carry a RequestID (Open, Close,
//     SetContents, Delete, Mkdir, CreateFile, TryAcquire, Release, SetACL,
//     Multi), after
//     any failure that may pass — NOT_MASTER, UNAVAILABLE, a lost reply, a
//     timeout. The session numbers each such call once (the same number on
//     every resend) and tells the cell the lowest number still in flight;
//     the cell applies a number at most once and answers a resend with the
//     first answer, on any master, so these calls are exactly-once across
//     failovers;
//   - Acquire (a waiting call: its request number lets a resend take the
//     parked call's place, but the cell keeps no answer of it),
//     CloseSession and [Client.RemoveMember] only when the request certainly
//     did nothing (NOT_MASTER, or no connection could be made), and
//     Acquire also when the master moves while it is parked (above); a
//     resend by a handle that already holds the lock gets its sequencer.
//
// A call of a session that gives up because no master could be reached
// waits until the session reaches one again (a KeepAlive reply, perhaps
// after jeopardy) and is sent again under the same rules, at most 3 rounds
// in all.
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
//	case ev := <-s.Events():
//		if ev.Kind == client.EventJeopardy || ev.Kind == client.EventExpired {
//			// The lock may be someone else's now (or soon): stop leading.
//			return fmt.Errorf("session %v", ev.Kind)
//		}
//	default:
//	}
//	return h.Release(ctx)
package client
