// Package vr is the replication protocol core of a lock cell: Viewstamped
// Replication Revisited (Liskov & Cowling, 2012) with the log on disk, a
// master lease, catch-up by entries or snapshots, reconfiguration by
// epochs and a probe (pre-vote) before view changes, as a pure state
// machine in the manner of etcd's raft RawNode. Messages, ticks and
// proposals go in ([Node.Step], [Node.Tick], [Node.Propose]); what to
// persist, send and apply comes out ([Node.Ready]), and [Node.Advance]
// says it was done. The package does no I/O and imports nothing of this
// module. Package replica's Driver carries out its Ready against Badger
// and the peer transport; this comment describes the protocol as built
// here.
//
// # The core and its driver
//
// A Node does no I/O, starts no goroutine, reads no clock and draws no
// random number. Its inputs are Step(message), Tick(now) — now being the
// driver's monotonic clock in nanoseconds —, Propose(commands) and
// Compact(meta). Its output is [Ready], which the driver carries out in
// this order: install a received snapshot; delete the log suffix from
// TruncateFrom; append Entries; store HardState; fsync once (MustSync);
// only then send Messages; apply Committed; call Advance. The driver calls
// nothing else between Ready and Advance. Because messages leave only
// after the fsync, everything a message implies (a view number, an entry
// being on disk) is durable before anyone hears of it. HardState is
// written after the log because LastNormalView describes the log and must
// never be ahead of it; a crash between the two leaves an older
// LastNormalView, which only makes the log look less complete (safe).
//
// One exception takes the primary's own fsync off the commit path: when its
// view is already on disk, the normal primary's Prepares and Commits come
// in Ready.EarlyMessages and may leave before (in parallel with) its own
// write, as etcd's raft lets a leader do. Nothing they imply needs the
// primary's disk: the primary counts itself towards a commit quorum only
// for entries it has persisted, Commit numbers only name such entries, and
// a primary that restarts never resumes its view (it starts a view
// change), so a backup holding entries its primary lost is a longer log of
// the same view, which the view change handles like any other.
//
// The primary goes one step further (Ready.PersistAsync): when a Ready only
// appends entries and all its messages are early, the driver may queue the
// write and go on at once, and the core counts the primary in the commit
// quorum only once the driver reports the write durable
// ([Node.Persisted]). So a commit needs the fastest quorum of disks, which
// may or may not include the primary's. Entries handed out for a queued
// write count as possibly on disk when a view change cuts the log, and the
// driver carries out any Ready without PersistAsync only after the queued
// writes, so the disk is always a prefix of what was handed out, in order.
//
// # Views, configuration, quorum
//
// The configuration is a sorted set of replica ids (with addresses, opaque
// to the core), each a voter or a learner; a quorum is a majority of the
// voters. It is log entry 1 (EntryConfig), the same on every replica of a
// new cell; a change is a later EntryConfig, proposed on the primary one
// at a time ([Node.ProposeConfig]). A learner gets the log and
// snapshots but counts in nothing; a voter change opens a new epoch,
// carried in the view number's high bits, and takes effect on a replica
// only once it knows the change committed (the primary that made it, when
// it stays a voter, then carries on as the new epoch's primary, lease and
// all, without a view change). Within an epoch the voters are
// fixed, so what this comment says of views and quorums holds epoch by
// epoch; reconfig.go argues why two epochs never commit conflicting
// entries.
//
// Views are numbered; the primary of view v is voters[v mod n]
// (round-robin, as in VRR). The alternative, electing the replica with the
// most complete log, needs a vote with split votes and randomized retries
// (raft's election is where etcd's 2 s failover goes). Round-robin makes
// the new primary known to everyone at once: a failover costs the detection
// timeout plus a few message delays and fsyncs. The new primary need not
// have the most complete log: it takes the most complete one during the
// view change (below). Only when the next replica in turn is down too does
// a failover take a second round (another view-change timeout).
//
// # Log entries and log matching
//
// Every entry carries the view in which a primary first assigned its index.
// Views never decrease along a log, and two logs holding an entry with the
// same index and view are identical up to it (each primary extends the log
// it started its view with, and a backup only extends or cuts its log to
// follow the primary's). So logs are compared by their views alone: a log's
// shape — runs of (view, last index) — describes thousands of entries in a
// few numbers, and view-change messages carry shapes, not entries.
//
// # Normal operation
//
// Propose appends commands on the normal primary. At each Ready the primary
// batches everything new into Prepares (at most MaxPrepareEntries and
// MaxPrepareBytes each) and pipelines up to MaxInflightPrepares per backup.
// A backup appends what follows its log (cutting an unverified suffix that
// differs), and answers PrepareOK with its last index after the fsync
// (Ready order). The primary commits an index once a quorum — itself
// counting only what it has persisted, and backups that are normal in the
// view — holds it on disk; the commit number rides on every Prepare and on
// the Commit heartbeat the primary sends every HeartbeatInterval. A lost
// Prepare shows as a backup rejecting the next one (it does not follow its
// log) or as no progress over a heartbeat; the primary resends from what
// the backup reported. Past MaxUncommittedEntries or MaxUncommittedBytes,
// Propose returns [ErrOverloaded]. A backup applies only entries it knows
// match the primary's log (up to min(commit, verified)).
//
// # View change
//
// A backup that hears nothing from its primary for ViewChangeTimeout (or
// learns that its process is gone: "Failure detection" below) first
// probes (a pre-vote, as raft's PreVote): it asks every replica whether
// they too hear no primary. Only with a quorum of yes does it move to view
// v+1. So one replica that is cut off, or deaf one way, cannot push a
// working view aside, and a primary that a quorum still hears keeps its
// view however slow it is for the others.
//
// Moving to view v+1 means: persist the view, status view-change, send
// StartViewChange to all. A replica hearing StartViewChange (or
// DoViewChange) for a higher view joins it the same way — but only if it
// has no working primary itself ("Every path into a view passes the
// pre-vote" below). Once a replica has
// StartViewChange from a quorum (itself included) and its lease promise
// (below) has run out, it sends DoViewChange to the new primary: its last
// normal view, its last index and that entry's view, its commit number, and
// its log's shape after the commit number. No entries: logs agree up to any
// commit number, and the shape says the rest.
//
// The new primary, with DoViewChange from a quorum (its own included),
// picks the best log: highest last normal view, then highest last index.
// It compares its own log with the best one's shape, cuts where it differs,
// and fetches only what it misses from the best replica (GetLog / Log, a
// bounded chunk at a time, or that replica's snapshot if the entries are
// compacted away). When its log equals the best log (same last index and
// view, hence the same log) it persists it with LastNormalView = v+1,
// becomes the normal primary with the commit number the highest of the
// DoViewChanges, and sends StartView: its start index, commit number, and
// the shape of its log after what that backup is known to hold.
//
// A backup receiving StartView enters the view as recovering: it cuts its
// log where the shape differs, keeps every entry that matches (dropping a
// committed entry a backup still holds could lose it), and takes missing
// entries by ordinary Prepares or a snapshot. It becomes normal — and
// persists LastNormalView = v+1 — only once its log holds the primary's
// whole start log: the view-change rule "highest last normal view wins"
// relies on every replica normal in a view holding everything that view
// started with. A replica that missed StartView learns of the view from any
// message of its primary that describes a log (a Prepare, a snapshot) and asks for
// StartView by answering "not normal".
//
// A replica never accepts anything from a view older than its own, and its
// view is on disk before it says anything in it; moving to a newer view, it
// forgets the messages it had queued in older ones, so no acknowledgement of
// an older view leaves once the newer view is on disk. A view change that does
// not complete within two timeouts (after the lease promise) moves on to
// the next view (after a probe, so that a cut-off replica does not run its
// view number up).
//
// # Restarts
//
// A replica restarts from its disk ([NewNode] with what [Persisted] holds):
// hard state, snapshot, log. One that was normal in its view resumes as a
// backup. One that was the primary does not resume: entries it had sent
// but not persisted may sit on backups, so it starts a view change at once
// (the fast path for a primary restarted by kill -9). One that was
// changing views stays in that view change. A restarted replica cannot
// know what lease it promised, so it waits a whole lease before it helps
// form a new view. Entries of a view after the one in the hard state (a
// write torn before its hard state) were never acknowledged and are
// dropped, in memory and, by the first Ready, on disk.
//
// # Catch-up and snapshots
//
// The application snapshots its state at an applied index, stores it with
// the metadata [Node.SnapshotMeta] gives (index, view, configuration), and
// calls [Node.Compact] with that metadata; the core drops the entries up
// to it from memory (keeping CompactMargin of them). The core goes on
// between SnapshotMeta and Compact, so the application may store the
// snapshot while the node works.
//
// A backup that needs compacted entries gets the snapshot: the core says
// so with a MsgSnapshot that carries only metadata, and the drivers move
// the bytes (package replica sends them in chunks, MsgSnapshotChunk,
// which are for the drivers: Step refuses them). The receiving core gets
// a MsgSnapshot, installs it through Ready (the whole log is replaced:
// every entry after a differing or missing index differs too), and
// continues by entries. A snapshot is never installed over a log that
// already holds its last entry.
//
// # Master lease
//
// Every HeartbeatInterval the primary starts a lease round (a stamp,
// remembered with its start time on its clock); every Prepare and Commit
// carries the current stamp, and PrepareOK echoes it. The primary holds a
// lease while a quorum (itself included) acknowledged, as normal backups of
// its view, a round that started less than LeaseDuration·(1−ε) ago on its
// clock, ε = [MaxClockDrift] = 2%: every clock advances between 1−ε and
// 1+ε times real time, forty times what NTP's slew allows. A backup that
// receives a round promises not to send DoViewChange (so not to help form a
// newer view) until LeaseDuration·(1+ε) has passed on its clock, counted
// from a clock reading taken after the round arrived (the next Tick). Any
// quorum forming a new view shares a replica with the quorum behind a
// lease, and that replica waits at least LeaseDuration of real time after
// the round arrived, which came after the round started; the primary stops
// at most LeaseDuration of real time after the round started. So the old
// lease is over before the new view can commit anything.
//
// [Node.CanServeReads] says the primary may answer reads from memory: it
// is normal, holds the lease, and has committed and applied the whole log
// its view started with (everything any earlier primary acknowledged). A
// read served then is linearizable: a write acknowledged before it is
// applied, and no newer primary can commit before the lease ends. The cell
// extends session leases only under this lease too (package cell/master
// argues the session lease rule on top of it).
//
// A primary that no quorum acknowledges for a view-change timeout past the
// end of its lease (LeaseDuration·(1−ε) + ViewChangeTimeout of live time
// since the newest acknowledged round began, 1.435 s by default) steps down: it starts
// the next view itself. Backups that still hear its heartbeats (it is deaf
// one way) would otherwise never change views, and a primary without a
// lease can serve nothing.
//
// # Failure detection: fast on proof of death, patient on silence
//
// Defaults: HeartbeatInterval 100 ms, LeaseDuration 240 ms, SuspectAfter
// 200 ms, ViewChangeTimeout 1.2 s. Silence and death are told apart:
//
//   - Silence is waited out long: a backup probes only after
//     ViewChangeTimeout without a word from its primary, and a primary
//     steps down only a view-change timeout past its lease. A primary
//     starved of CPU for about a second (a loaded machine, a long GC, a
//     paused VM) therefore keeps its view: when it runs again its backups
//     still follow it and its next heartbeat renews its lease. (While it
//     is starved it holds no lease and serves nothing; that is a pause,
//     not a failover.) Failover on silence — a primary cut off, or
//     SIGSTOPped — takes the timeout plus a view change: about 1.2–1.4 s.
//   - A replica's own late timers say it was starved, not that its
//     primary died: silence (and the step-down) is measured in live time,
//     which advances with the clock but by at most HeartbeatInterval per
//     Tick. A backup frozen for ten seconds counts 100 ms of silence when it
//     runs again, finds its primary's messages waiting (a driver feeds the
//     messages that arrived before it ticks), and probes nobody. Leases and
//     promises, which safety rests on, stay on the real clock.
//   - Death is acted on at once. After SuspectAfter of silence a backup
//     asks its driver whether the primary's process is there
//     ([Node.Suspect]; the cell dials the primary's peer port), and a
//     refused connection — nothing listens there: kill -9 closes a
//     process's sockets at once — comes back as [Node.PeerGone], on which
//     the backup probes at once; the other backups grant, having found the
//     same. A dial that opens (a slow process; a stopped one, whose kernel
//     still accepts) or times out (a partition) is no evidence. A replica
//     waiting in a view change for a new primary that turns out dead moves
//     to the next view the same way. Evidence shortens detection only: the
//     new view still waits for every lease promise to run out, so a wrong
//     refusal (a firewall that rejects) costs a view change, never the
//     lease rule. From kill -9 of the primary to a new primary serving: the
//     lease's remainder (at most LeaseDuration after the last round) plus a
//     view change, about 0.2–0.3 s; 1.2 s more only when the next primary
//     in turn is down too and nothing refuses (a whole host gone).
//
// # Every path into a view passes the pre-vote
//
// A replica that hears a working primary (hearsPrimary: a backup
// that heard its primary within the timeout and has no evidence of its
// death; a primary that a quorum acknowledged within the timeout) neither
// grants a probe nor joins a newer view on another replica's
// StartViewChange or DoViewChange. So one replica — confused, stale, with a
// bad clock, or a forged message — cannot depose a primary the others
// still hear. The exceptions are the ones that cannot be one replica's
// mistake: the message comes from the primary of this replica's own view
// (it stepped down, or restarted); so many other replicas are in newer
// views that the primary can no longer gather a quorum (quorumAhead: a
// primary that was paused and still thinks its view works); and, on the
// primary, a voter that has been in a newer view for a whole view-change
// timeout (strandedFor): a voter can be left ahead honestly (a quorum
// granted its probe, and the granter heard the primary again before the
// voter's StartViewChange came), never comes back to the older view, and
// would otherwise be lost to the cell until its next failure. The primary
// follows it, and one view change later the cell has every voter again.
//
// Views move one at a time on another replica's word. A replica without a
// primary joins view v+1 when asked; a view further ahead only when it
// granted a probe for that view itself, or after a quorum granted its own
// probe for it (granters: replicas without a working primary below that
// view, or changing to it), or on the word of
// that view's primary (StartView, Prepare). That is how a replica that
// missed view changes catches up. A heartbeat (Commit) of a newer view, or
// of the view a replica is still changing to, is not followed: it
// describes no log, and on a forged header it could strand a replica in a
// view, or an epoch, nobody leads; the new primary resends StartView every
// heartbeat instead.
//
// The arithmetic is total. A view number is epoch<<32 | counter ([EpochOf],
// [ViewCounter]); a message naming a counter in the last 2^24 of its epoch
// is refused unless it is at most one ahead, so no message can bring a
// replica near the end of an epoch, a view the cell could not leave
// (nextView refuses to pass it): from anything a message can cause, that
// is 16.7 million view changes away.
//
// # What the core trusts
//
// Peer messages are checked for form and against the configuration
// (validate.go): a known sender that is a member of the configuration the
// message's view claims, numbers in range, bounded sizes, roles that fit
// the view (a Prepare only from its view's primary). A malformed message
// is dropped and Step returns an error wrapping [ErrInvalidMessage]; one
// from a replica outside the configuration of its view's epoch is stale,
// not malformed, and is ignored. Beyond that, the core trusts the bodies
// of its peers' messages and the headers of those that describe a log —
// Prepare, PrepareOK, DoViewChange, StartView, GetLog, Log, Snapshot: a
// member that lies about its log (acknowledges entries it does not hold,
// claims a view it was not normal in) is outside the model. TLS on the
// peer port keeps strangers out. The headers of the others — Probe,
// ProbeReply, StartViewChange, Commit — may be replayed, re-addressed, or
// forged in view, epoch, sender and grant, and the cell still has a master
// soon after the forger stops: the simulator's forger (cell/sim,
// TestSimForger) does exactly that among honest replicas.
//
// # How it is tested
//
// The paper_*_test.go files step Nodes by hand through a small in-test
// network (net_test.go) that carries out each Ready as package replica's
// Driver does, one test per rule of the paper's sections and of this
// comment: normal operation (§4.1) and view changes with the pre-vote
// (§4.2) in paper_test.go, catch-up by entries and snapshots in
// paper_catchup_test.go, restarts (§4.3), the lease and failure
// detection in paper_restart_test.go, reconfiguration by epochs (§7) in
// paper_reconfig_test.go, the validation rules and the view arithmetic
// in paper_validate_test.go. validate_test.go has a table of
// malformed messages, and FuzzStep feeds arbitrary messages, ticks and
// proposals (a node never panics). Package replica runs the core through
// its Driver on small in-memory clusters, and cell/sim runs the whole
// cell's code under faults.
//
// # Not built yet
//
//   - reads when the lease has lapsed answered through the log instead of
//     refused.
package vr
