// Package cell is a replica process of a Chubby lock cell: the Kitex
// handlers of the client IDL (idl/chubby.thrift) and the master's duties.
//
// # A request's path
//
// A client call, from the wire to its answer, on the master (the side
// paths follow the diagram):
//
//	client call (Thrift over Kitex: rpc.NewServer's limits, deadlines, metrics)
//	  |
//	  v
//	handler (handler.go), one method per IDL call
//	  |  serveCheck / serveCheckWait (failover.go): this replica serves as
//	  |    master? Else NOT_MASTER, naming the master when known; while
//	  |    none is known the call is first held (noMasterHold)
//	  |  live: the session is alive here (leases.alive) and was created by
//	  |    the caller's principal (Server.checkOwner); else SESSION_EXPIRED
//	  |    or PERMISSION_DENIED
//	  |  validation at the edge: paths, sizes, modes, limits, RequestID
//	  |    (checkRID); INVALID_ARGUMENT or TOO_LARGE, nothing proposed
//	  |
//	  +-- read (GetStat, GetContentsAndStat, ReadDir, GetSequencer,
//	  |     CheckSequencer): awaitLease (the master lease is held now)
//	  |     -> changes.register if it asks to cache -> fs.State under
//	  |     machine.read -> changes.registerACL -> reply
//	  |
//	  +-- change: a proposal value -> Server.submit (proposal.go)
//	        |  changes.submit (changes.go) waits for the verdict of the
//	        |    change pipeline (master.Pipeline), under one mutex:
//	        |    an EndSession drains its session's commands in flight;
//	        |    master.Writes stamps the command with the master's clock;
//	        |    fs.State.Reach says what of the clients' caches it may
//	        |    change; master.Cache queues an invalidation for every
//	        |    cacher ----------------------------------> side path (c)
//	        |    and the change waits until each has acknowledged or its
//	        |    lease ended
//	        |  the proposal's session and request number go into the
//	        |    command (the state's request table makes it exactly-once);
//	        |    encode it (fs.EncodeCommand): at most vr.MaxEntryBytes
//	        v
//	replica.Replicated.ProposeInView: only in the view the invalidations
//	        |  were made in (Propose for a command whose reach is empty)
//	        |  the Driver's loop hands it to vr.Node: the primary sends
//	        |    Prepare to the backups; each appends it to its log on
//	        |    Badger (replica.Storage) and fsyncs before it answers
//	        |  committed once a majority of the voters has it on disk
//	        v
//	machine.Apply (machine.go), on every replica, in log order
//	        |  fs.State.ApplyBytes validates everything again, changes the
//	        |    state and returns the result and its fs.Effects;
//	        |    machine.dispatch hands the effects on:
//	        |      Woken         -> parked Acquires answered -> side path (b)
//	        |      Notified      -> leases.wake: parked KeepAlives -> (a)
//	        |      EndedSessions -> changes.forget, leases.ended
//	        |  fs.State.NextTimer -> scheduleTick: the master proposes a
//	        |    Tick at the next lock-delay end
//	        v
//	submit, on the master: the result (a refused command's error is
//	        |  its ChubbyError; a log failure becomes NOT_MASTER or, mostly,
//	        |  UNAVAILABLE, the outcome unknown unless the log refused it);
//	        |  changes.finished: the reached nodes become cachable again
//	        |  and the write leaves the table (only after UncertainHold
//	        |  when the outcome is unknown)
//	        v
//	handler builds the reply -> Kitex -> client
//
// The side paths:
//
//	(a) KeepAlive: changes.ack records invalidation acks, leases.register
//	    parks the call (an rpc.Deferred) until KeepAliveMargin before the
//	    earliest lease in it ends, or until events, invalidations or a
//	    session end wake it (Server.keepAlive carries out the call's
//	    master.KeepAliveCall); the leases are extended only under
//	    the master lease held then; attachEvents and changes.attach fill in
//	    the reply.
//	(b) Acquire: handler.acquire carries out the call's
//	    master.AcquireCall, which parks the call (machine.park, an
//	    rpc.Deferred keyed by handle) and proposes a waiting Acquire; a
//	    later command's Woken effect answers it, or its wait runs out and
//	    it proposes CancelWait (master.Withdrawal): TIMED_OUT once that
//	    applied and the lock was not granted first, UNAVAILABLE (the
//	    lock may yet be granted) when it did not commit. The table of
//	    parked calls is master.Waiters.
//	(c) Invalidations to cachers: queued in master.Cache and carried by the
//	    cacher's next KeepAlive reply (a parked one is answered at once);
//	    the client acknowledges in its following KeepAlive.
//	(d) The oracle (oracle.go, master.Oracle): GetTimestamps is answered
//	    from a window in memory under the master lease; the window is
//	    reserved ahead of need by ReserveTimestamps commands proposed in
//	    the background through submit like any change.
//	(e) Membership (membership.go, autopilot.go): RemoveMember and the
//	    autopilot propose configuration changes with
//	    replica.Replicated.ProposeConfig, not through submit; the log
//	    reports the configuration in force (onConfig).
//	(f) Failover (failover.go): the log reports role changes (roleChanged);
//	    becomeMaster waits for reads to be allowed, takes the epoch, gives
//	    recovered sessions their lease, starts the cache table and the
//	    oracle afresh, starts serving and withdraws stale waits (new
//	    Acquires wait for that); loseMaster answers every parked call
//	    NOT_MASTER.
//
// The master never changes state directly. A handler validates its request
// at the edge, then either reads the fs state under a read lock (GetStat,
// GetContentsAndStat, ReadDir, GetSequencer, CheckSequencer) or proposes a
// command (idl/fsm.thrift) to the log and waits until the command is durable
// and applied; the fs state machine validates everything again at apply, so
// a bad request changes nothing either way.
//
// ReadDir answers one page of a listing (fs.State.ReadDirPage): the entries
// after ReadDirRequest.after, at most limit of them (0: MAX_READDIR_ENTRIES;
// more, or a negative limit or an after that is not a name, is
// INVALID_ARGUMENT) and at most readDirPageBytes (half the payload limit,
// rpc.DefaultMaxPayloadBytes) of entries, with more and the directory's
// content generation. So a directory at fs's MaxChildren limit, with the
// longest names and paths, lists completely in replies well under the
// payload limit. Only a
// complete listing in one page (more unset) can be cacheable. Every
// request limit is walked at its bound and one past it in limits_test.go.
//
// Master duties:
//
//   - Session leases (leases.go, around cell/master.Leases, where the
//     lease rule is argued): the lease timer is the master's own and is not
//     replicated; only session creation and end are commands. A KeepAlive
//     is parked (rpc.Deferred) until shortly before the earliest lease in
//     it would end, then — only if this replica holds its master lease at
//     that moment; a lapsed one may come back within leaseHold, else
//     the call is refused UNAVAILABLE — every lease in it is extended
//     and the call answered with what the client may count, less the
//     clock-drift bound. A session whose lease runs out is ended through
//     the log (EndSession with expired set: its locks go into lock-delay,
//     its ephemeral nodes go). Reads, CheckSequencer, GetMaster and the
//     lock answers read from memory wait for the lease the same way.
//   - Parked Acquires (machine, around master.Waiters): a blocking Acquire
//     is proposed as a waiting request; when the lock is not free the
//     handler parks until a later command's effects grant it, its wait
//     runs out (then it proposes CancelWait; a grant that won the race is
//     honoured, and a withdrawal that did not commit is answered
//     UNAVAILABLE, not TIMED_OUT: the lock may yet be granted), or its
//     handle or session ends. A resend of the parked call (its request
//     number) takes its place once its request is queued, and is told to
//     send again (UNAVAILABLE) while the request is still on its way. An
//     attempt of a request that is over — answered by this master, or
//     below its session's floor (fs.State.RequestFinished) — is answered
//     from the state, not queued again. Only the effects of commands after its request applied
//     (fs.Effects.Queued) answer it: a wake for an older request of the
//     handle does not. A request of the handle found still waiting with
//     nobody parked on it (an earlier master's, or one whose withdrawal
//     failed) is withdrawn and the Acquire proposed again, so a refused or
//     cancelled wait leaves the handle able to wait again.
//   - Lock-delay timers: after each command the master asks fs for the next
//     lock-delay end and proposes a Tick at that time, which grants waiters
//     (their locks' cachers are invalidated first, as for any command).
//   - Events: fs queues them per session as commands apply
//     (replicated state; see package fs, "Events"). A KeepAlive names, per
//     session, the highest event seq the client received (acked_event); it
//     is answered at once when a session has later events, and a parked
//     one is woken as soon as a command queues one (Effects.Notified). The
//     reply carries each session's events after its ack (at most
//     maxReplyEvents events and about maxReplyEventBytes per reply; the
//     rest go with the next one, answered at once). The master does not log acks: it keeps them with
//     the leases and proposes one TrimEvents for every session whose ack
//     moved at most every Config.EventTrimInterval. So a new master
//     may send again events a client already had; clients drop them by
//     seq. The first reply of a new master's epoch to each session (it is
//     answered at once) starts with MASTER_FAILED_OVER (seq 0, the epoch),
//     which is not queued or acknowledged.
//   - Cache invalidation (changes.go, around cell/master.Pipeline and
//     master.Cache): a session created with
//     CreateSessionRequest.cache (replicated) may cache. A GetContentsAndStat
//     or ReadDir asking to cache registers the session as a cacher of the
//     node, before the state is read, and says cacheable; a node with a
//     change in progress, or a table at its limit (Config.MaxCachedPerSession,
//     Config.MaxCachedPerCell), is served uncachable.
//     The table is in memory only. Before proposing a command, the master
//     stamps it and asks fs what it may change of what clients cache
//     (fs.State.Reach, computed from the state and the command's time:
//     the locks whose lock-delay its clock ends, a handle's node and its
//     parent's listing, a creation's directory and its parent, a delete's
//     subtree and the ephemeral directories it may leave empty, a session
//     end's locks and ephemeral nodes; and the ACL names whose file it
//     may rewrite or remove, which reach every cached node whose read
//     right they govern: a read registers, after it, the read ACL name it
//     saw) with what expired session ends in
//     flight may put into lock-delay: a superset of what the command
//     changes, although commands ahead of it apply first (master.Pipeline
//     and master.Writes: stamps never decrease in the order
//     reaches are computed, and a session end waits until its session has
//     no command in flight and refuses new ones). It makes those paths
//     uncachable (and everything under a deleted subtree), queues an
//     invalidation for each of their cachers (answering a parked KeepAlive
//     at once), and waits until each cacher has acknowledged
//     (KeepAliveItem.acked_invalidation) or its lease has ended, bounded by
//     one lease plus 1 s. Only then is the command proposed; the paths
//     become cachable when it has applied (after a command of unknown
//     outcome, only after the pipeline's UncertainHold). An ack counts only
//     from a KeepAlive that names this master's epoch (or none), so an ack
//     meant for another master counts for nothing. A new master knows no cachers: every recovered
//     caching session gets invalidate_all on its first KeepAlive, and every
//     change waits until it has acknowledged or its lease has run out.
//   - Membership (membership.go, autopilot.go, bootstrap.go): with gossip
//     (cell/discovery) the master's autopilot adds spares as learners,
//     promotes learners caught up for PromoteAfter, and replaces voters
//     dead by gossip and silent for DeadAfter, one configuration change at
//     a time through the log (replica/vr/reconfig.go); every decision is
//     logged and listed on the status page. RemoveMember is the operator's
//     forced removal; it answers once its change has committed, or, when
//     it is not known committed shortly before the caller's deadline (at
//     most configCommitWait), UNAVAILABLE "outcome unknown: …" (it may still take
//     effect). GetMaster names every member, so clients follow the
//     configuration.
//   - Failover and restart: every session in the recovered state gets the
//     recovered lease (L·(1+ε)/(1−ε): longer than any earlier master can
//     have promised, clock drift included), Acquires left waiting by the
//     previous run are withdrawn, and the master epoch goes up by one.
//   - Disk failure: a failed log write or fsync stops the replica
//     (fail-stop): Serve returns ErrDiskFailed, every parked call is
//     answered, /healthz says 503, and chubbyd exits 1; the cell fails over
//     as after a crash.
//
// Every parked call has a server-side bound, because Kitex does not cancel
// a handler's context when a plain client gives up. Every queue and table
// has a limit (Config).
package cell
