// Package replica keeps a lock cell's replicated log: Replicated (the log
// of one replica process), Driver (the one loop that carries out the
// protocol core's work, behind narrow interfaces: Disk, Transport,
// StateMachine and a clock), Storage (the log and snapshots on Badger) and
// the Kitex peer transport; in the subpackage replica/vr, the protocol
// core: Viewstamped Replication Revisited (Liskov & Cowling, 2012) with
// the log on disk, as a pure state machine in the manner of etcd's raft
// RawNode. The deterministic simulator that runs the Driver, the real fs
// state machine, the master's session tables (cell/master) and the
// client's lease rules (client/lease) through a faulty network, crashes,
// failing disks, pauses and drifting clocks, and checks what clients
// believe, is cell/sim.
//
// The protocol — views, the probe, view changes, normal operation,
// commits, epochs and reconfiguration, the master lease, failure
// detection, the view arithmetic and what the core trusts — is described
// in package vr's documentation (replica/vr/doc.go). This comment
// describes what this package adds around it.
//
// # The driver
//
// A vr.Node does no I/O and reads no clock. The Driver (driver.go) feeds
// it messages, ticks of the driver's monotonic clock and proposals, and
// carries out each vr.Ready in the order vr.Ready prescribes: install a
// received snapshot; delete the log suffix from TruncateFrom; append
// Entries; store HardState; fsync once (MustSync); only then send
// Messages; apply Committed; call Advance. The driver calls nothing else
// between Ready and Advance: while a write is out it is Busy, and the code
// around it (Replicated's goroutine, the simulator's event loop) hands it
// only completions (Driver.Written, SnapshotSaved). Every completion comes
// back as an input, so the Driver runs the same whether Disk.Write
// finished at once (Replicated's disk writer does, when idle) or a
// simulated millisecond later.
//
// The normal primary's Ready.EarlyMessages (its Prepares and Commits,
// when its view is on disk) leave before its own write. With
// Ready.PersistAsync the driver queues the write to a disk-writer
// goroutine and goes on at once; the writer joins consecutive queued
// writes into one batch with one fsync and reports back, and the driver
// then calls vr.Node.Persisted, so the primary's loop keeps taking
// proposals and acknowledgements while its disk works. Any Ready without
// PersistAsync first waits for the queued writes. The simulator sends
// early messages before its simulated write, crashes replicas in the
// middle of it, and models the writer (a queue on one disk, torn at a
// crash after a random prefix of whole writes).
//
// Replicated's loop feeds the messages that arrived before each tick, so a
// replica whose loop was stalled finds its primary's messages waiting
// instead of counting silence. For failure detection the driver asks
// vr.Node.Suspect after each tick; the cell dials that replica's peer port
// (PeerTransport.CheckPeer), and a refused connection comes back as
// Driver.PeerGone.
//
// # Snapshots
//
// The application snapshots its state at an applied index, stores it with
// vr.SnapshotMeta, and the driver calls vr.Node.Compact with that
// metadata. StateMachine.Snapshot only captures the state (the cell keeps
// a shadow copy of it a few entries behind, on a goroutine of its own, and
// encodes that), and the encoding and the store (two fsyncs, then the
// covered log keys deleted in paced batches) run on a goroutine of their
// own, one snapshot at a time; before it installs a received snapshot the
// driver waits for that store to finish. Encoding on the loop stopped it
// for seconds at a million nodes; storing on it stalled every command for
// 100-400 ms every 50,000 entries.
//
// The core asks for a snapshot to be sent with a MsgSnapshot that carries
// only metadata, and the drivers move the bytes as the sender's disk
// stores them, in chunks, a window at a time, staged on the receiver's
// disk as they come, so that a cut transfer resumes where the receiver's
// disk stands and memory holds a window, not a state (snapxfer.go). Once
// the last chunk is in and checked (length, CRC-32C, the envelope against
// the metadata), the receiving core gets the MsgSnapshot and installs it
// through Ready; the staged chunks become the stored snapshot by one
// metadata write. While it sends a snapshot a replica takes no new one
// unless its log grew to four snapshot intervals, so the chunks it reads
// and the entries the receiver needs next stay.
//
// A backup reads the stored snapshot the same way: Replicated.SnapshotNow
// has the driver take one at once (RequestSnapshot: the same capture,
// encode and store as a periodic one), and ReadSnapshotChunk reads it from
// the disk chunk by chunk, each read keeping it for BackupPin from
// periodic replacement (SnapshotPinned). Seed writes a snapshot into
// empty storage as the committed state of a new cell (chubbyd restore).
//
// # Format versions
//
// The data directory has a layout version (LayoutVersion, the m/layout
// record); OpenStorage refuses a newer one (LayoutError) before it reads
// or changes anything. The entries' contents are the state machine's to
// version: ReplicatedConfig.CheckEntry sees every command entry on disk
// before anything is restored.
//
// # Exactly-once
//
// Commands carry (session, seq); fs remembers the answers of each
// session's recent commands (successes and refusals) and answers a retried
// seq with the saved answer, so a client that retries across a failover
// applies a command once. A client hears an answer only from an entry
// that committed and applied, and every later attempt gets that saved
// answer, so the simulator checks a refusal as strictly as a success: a
// no-op within its call. A command whose session ended before its answer
// came has an unknown outcome (the session's saved answers end with it).
//
// # How it is tested
//
// replica/vr tests the core on its own (see its documentation).
// replica/cluster_test.go runs the core through the Driver on a small
// in-memory cluster (replication, failover and rejoin, catch-up by
// snapshot, a deaf backup that must not cause a view change, a deaf
// primary that must step down, the old lease ending before a new view
// forms, also when a view change starts on wrong evidence of death),
// availability_test.go the failure detector and the pre-vote (a second's
// stall of the primary or a backup changes no view, nor does a backup's
// far longer stall; a silent primary is replaced after the timeout and
// within 2 s, a dead one within the lease and a few heartbeats; one
// replica's StartViewChange, DoViewChange or probe moves nobody; views
// near the end of an epoch are refused; a replica that missed views joins
// one far ahead), and reconfig_test.go every kind of configuration change.
// cell/sim runs the whole cell's code with the real fs under faults and
// checks agreement, what clients believe about their locks and caches,
// linearizability and liveness, also with CPU stalls alone
// (TestSimStalls: no view change) and with a forger among the replicas
// (TestSimForger); see its package documentation. Every seed that ever
// failed is kept in its regressions table.
//
// The simulator measures failover (TestFailoverLatency: loopback-like
// delays, 0.1–1.5 ms fsyncs, clients whose calls time out after 100–200
// ms, follow NOT_MASTER hints and hear a reset when the master dies, and
// whose sessions run the library's KeepAlive loop and master watch): from killing the primary of a loaded cell to the next client
// operation completed, median 268 ms, p99 373 ms over 100 seeds.
// TestSimStalls freezes replicas' loops (the primary's half the time) for
// up to 1.05 s under the clients' load and demands that no view change.
package replica
