// Package cell is a replica process of a Chubby lock cell: the Kitex
// handlers of the client IDL (idl/chubby.thrift) and the master's duties.
//
// The master never changes state directly. A handler validates its request
// at the edge, then either reads the fs state under a read lock (GetStat,
// GetContentsAndStat, ReadDir, GetSequencer, CheckSequencer) or proposes a
// command (idl/fsm.thrift) to the log and waits until the command is durable
// and applied; the fs state machine validates everything again at apply, so
// a bad request changes nothing either way.
//
// Master duties:
//
//   - Session leases (leases): the lease timer is the master's own and is not
//     replicated; only session creation and end are commands. A KeepAlive is
//     parked (rpc.Deferred) until shortly before the earliest lease in it
//     would end, then every lease in it is extended and the call answered. A
//     session whose lease runs out is ended through the log (EndSession with
//     expired set: its locks go into lock-delay, its ephemeral nodes go).
//   - Parked Acquires (machine): a blocking Acquire is proposed as a waiting
//     request; when the lock is not free the handler parks until a later
//     command's effects grant it, its wait runs out (then it proposes
//     CancelWait; a grant that won the race is honoured), or its handle or
//     session ends.
//   - Lock-delay timers: after each command the master asks fs for the next
//     lock-delay end and proposes a Tick at that time, which grants waiters.
//   - Restart: every session in the recovered state gets a full lease (the
//     longest it could have been granted), Acquires left waiting by the
//     previous run are withdrawn, and the master epoch goes up by one.
//
// Every parked call has a server-side bound, because Kitex does not cancel
// a handler's context when a plain client gives up. Every queue and table
// has a limit (Config).
package cell
