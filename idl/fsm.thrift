// fsm.thrift — the replicated commands of the fs state machine, their
// results, and the snapshot encoding. Not a client interface: replicas put
// these in the log and apply them in order; applying the same log gives the
// same state, byte for byte.

namespace go fsm

include "chubby.thrift"

// EndSession ends a session: expired (its lease ran out) means lock-delay
// applies to the locks it held; a clean close releases them at once.
struct EndSession {
    1: required chubby.SessionID session
    2: required bool expired
}

// Acquire queues (wait) or tries (no wait) a lock. The wait deadline is the
// master's business: it proposes CancelWait when it passes.
struct Acquire {
    1: required chubby.Handle handle
    2: required chubby.LockMode mode
    3: required bool wait
    4: required i64 lock_delay_ms
}

// CancelWait removes a handle's pending Acquire, if it is still waiting.
struct CancelWait {
    1: required chubby.Handle handle
}

// Tick lets time-driven state advance (lock-delay ends) at Command.time_ms.
struct Tick {
}

// EventAck says a session's client has received its events up to acked.
struct EventAck {
    1: required chubby.SessionID session
    2: required i64 acked
}

// TrimEvents forgets the events clients have acknowledged. The master
// batches the acks of many sessions (KeepAliveItem.acked_event) into one
// command now and then; ended sessions in it are skipped.
struct TrimEvents {
    1: required list<EventAck> acks  // at most 10,000
}

// InitACL gives the cell its first administrator (chubbyd --admin), once:
// if "/" has no ACL names and /acl does not exist, it creates /acl and the
// file /acl/admin listing admin, and names "admin" for all three rights of
// "/" and /acl. With recover, a cell where "/" or /acl has no principal
// holding change_acl (a lock-out from before fs refused one) is given admin
// back: /acl and a permanent /acl/admin listing admin (with the entries it
// had, if any), and change_acl "admin" on "/", /acl and /acl/admin.
// Otherwise it changes nothing (not an error).
struct InitACL {
    1: required string admin
    2: optional bool recover
}

// ReserveTimestamps raises the timestamp oracle's high-water mark to upto
// (1..2^62) if it is lower; a lower upto changes nothing. The master hands
// out timestamps only up to a mark that has committed, from memory, so a
// new master, starting above the mark, never repeats or goes back.
struct ReserveTimestamps {
    1: required i64 upto
}

union Op {
    1: chubby.CreateSessionRequest create_session
    2: EndSession end_session
    3: chubby.OpenRequest open
    4: chubby.CloseRequest close
    5: chubby.SetContentsRequest set_contents
    6: chubby.DeleteRequest delete_node
    7: chubby.MkdirRequest mkdir
    8: chubby.CreateFileRequest create_file
    9: Acquire acquire
    10: chubby.HandleRequest release
    11: CancelWait cancel_wait
    12: Tick tick
    13: TrimEvents trim_events
    14: chubby.SetACLRequest set_acl
    15: InitACL init_acl
    16: ReserveTimestamps reserve_timestamps
    17: chubby.MultiRequest multi
}

// Command is one log entry. With session and seq it is exactly-once per
// session, with many requests in flight (see package fs, "Exactly-once").
struct Command {
    1: required i64 time_ms              // the master's clock (Unix ms) when it proposed the command
    2: optional chubby.SessionID session // with seq: exactly-once across retries
    3: optional i64 seq                  // client request sequence, >0, unique per session (RequestID.seq)
    4: required Op op
    5: optional i64 seq_floor            // RequestID.floor, 1..seq: the session's requests below it are finished, their answers may be forgotten; unset: seq
    6: optional string principal         // CreateSession only: who the caller is, from its certificate (the master sets it; unset: anonymous)
    7: optional i32 version              // the command encoding's format version (fs.CommandVersion); unset: 1. A replica refuses a newer one
}

struct Result {
    1: optional chubby.ChubbyError err
    2: optional chubby.SessionID session
    3: optional chubby.Handle handle
    4: optional chubby.Stat stat
    5: optional chubby.Sequencer sequencer
    6: optional bool created
    7: optional bool waiting  // Acquire with wait: queued, not granted yet
    8: optional i64 timestamps_reserved  // ReserveTimestamps: the high-water mark after it
    9: optional chubby.MultiResponse multi
}

// ---------------------------------------------------------------------------
// Snapshot: the whole state of the fs state machine. Every list is in a
// fixed order (given below), so that equal states encode to equal bytes.

// SnapNode is one node of the namespace.
struct SnapNode {
    1: required string path                  // absolute; "/" is the root
    2: required chubby.NodeKind kind
    3: required i64 instance
    4: required i64 content_generation
    5: required i64 lock_generation
    6: required i64 acl_generation
    7: required i64 checksum                 // CRC-32C of content, verified on restore
    8: required binary content               // files only
    9: required i64 create_time_ms
    10: required i64 modify_time_ms
    11: required chubby.SessionID ephemeral_owner  // 0: permanent
    12: required i64 next_sequence           // directories: next sequential-name counter
    13: optional chubby.LockMode lock_mode   // unset: lock free
    14: required list<i64> lock_holders      // handle ids, ascending
    15: required list<i64> lock_waiters      // handle ids, FIFO order (head first)
    16: required i64 lock_delay_until_ms     // 0: no lock-delay pending
    17: optional chubby.ACLNames acl         // unset: all three names empty
}

// SnapAnswer is the saved answer of one sequenced command of a session.
struct SnapAnswer {
    1: required i64 seq
    2: required Result result  // a success: refused commands are not saved
}

// SnapSession is one live session and its exactly-once record.
struct SnapSession {
    1: required chubby.SessionID id
    2: required string client_name
    3: required i64 create_time_ms
    4: required i64 seq_floor             // >= 1: the session's requests numbered below it are finished
    5: required list<SnapAnswer> answers  // saved answers, seq >= seq_floor, ascending by seq
    6: optional i64 last_event_seq        // seq of the newest event ever queued (unset: 0, none)
    7: optional list<chubby.Event> events // queued events, ascending and gapless, the last at last_event_seq
    8: optional bool cache                // CreateSessionRequest.cache: the client caches
    9: optional string principal          // unset: anonymous
}

// SnapHandle is one open handle. Its node is found by path and instance; a
// handle whose node was deleted or re-created stays (invalid) until closed.
struct SnapHandle {
    1: required i64 id
    2: required chubby.SessionID session
    3: required string path
    4: required i64 instance
    5: required chubby.OpenMode mode
    6: required i32 event_mask
    7: optional chubby.LockMode held_mode     // set: holds the lock of its node
    8: required i64 held_lock_delay_ms
    9: optional chubby.LockMode wait_mode     // set: waits in its node's queue
    10: required i64 wait_lock_delay_ms
}

struct Snapshot {
    1: required i32 version              // 3 (2: before events; still read); fs.SnapshotVersion
    2: required i64 now_ms               // the state's clock: the latest command time applied
    3: required i64 next_session         // id counters: the next id handed out
    4: required i64 next_handle
    5: required i64 next_instance
    6: required list<SnapNode> nodes          // depth-first from "/", siblings ascending by name (parents first)
    7: required list<SnapSession> sessions    // ascending by id
    8: required list<SnapHandle> handles      // ascending by id
    9: optional i64 timestamps_reserved       // the oracle's high-water mark (unset: 0)
}

// ---------------------------------------------------------------------------
// Backup: a file written by chubbyfs snapshot save and read by chubbyd
// restore. It is the 8 bytes "CHUBBYBK", a 4-byte big-endian length, that
// many bytes of Thrift binary BackupHeader, then exactly length bytes of
// the snapshot as the master's disk stores it (the replication protocol's
// envelope, then the fs Snapshot), and nothing after.

struct BackupHeader {
    1: required string cell              // the name of the cell it was saved from
    2: required i64 index                // the log index the snapshot was taken at
    3: required i64 length               // bytes of snapshot after the header
    4: required i64 checksum             // their CRC-32C
    5: required i32 snapshot_version     // Snapshot.version of the fs snapshot inside
    6: required i32 layout_version       // the saving replica's data directory format (replica.LayoutVersion)
    7: required i32 command_version      // the saving replica's log entry format (fs.CommandVersion)
    8: required i64 saved_unix_ms        // when the save began, by the saving tool's clock
    9: required string master_id         // the replica that served it
}
