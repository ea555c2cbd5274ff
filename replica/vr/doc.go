// Package vr is the replication protocol core of a lock cell: Viewstamped
// Replication Revisited with the log on disk, a master lease, catch-up by
// entries or snapshots, as a pure state machine. Messages, ticks and
// proposals go in (Node.Step, Node.Tick, Node.Propose); what to persist,
// send and apply comes out (Node.Ready), and Node.Advance says it was
// done. The package does no I/O and imports nothing of this module.
//
// The protocol as built — views, quorums, persistence order, the lease and
// its clock-drift bound, catch-up, and what is not built yet — is described
// in the documentation of package replica (replica/doc.go).
package vr
