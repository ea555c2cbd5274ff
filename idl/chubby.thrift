// chubby.thrift — the client-facing interface of a Chubby lock cell.
//
// Four services are served together on one port (the Kitex server registers
// the combined service, so a plain Apache Thrift client generated from any
// one of them, framed or buffered strict binary, reaches the same cell):
//
//   Session     CreateSession, KeepAlive (many sessions per call), CloseSession
//   FileSystem  Open, Close, GetContentsAndStat, GetStat, ReadDir, SetContents,
//               Delete, Mkdir, CreateFile, SetACL, Multi
//   Lock        Acquire, TryAcquire, Release, GetSequencer, CheckSequencer
//   Cell        GetMaster, GetStatus, RemoveMember, WhoAmI, SnapshotRead
//   Oracle      GetTimestamps
//
// Every call that fails throws ChubbyError with a code. A refused call changes
// nothing. With TLS, the caller's certificate names its principal, and every
// call that needs a right on a node checks it (see ACLNames). All durations are milliseconds; all times the server reports are
// durations relative to the moment the reply was produced, because client and
// server clocks are not synchronised.

namespace go chubby
namespace py chubby
namespace java chubby

// ---------------------------------------------------------------------------
// Limits. The server enforces them; clients may use them to fail early.

const i32 MAX_CONTENT_BYTES = 262144         // 256 KiB per file (Chubby's limit)
const i32 MAX_NAME_BYTES = 255               // one path component
const i32 MAX_PATH_BYTES = 4096              // a whole path
const i32 MAX_PATH_DEPTH = 64                // components in a path
const i32 MAX_CLIENT_NAME_BYTES = 256        // CreateSession.client_name
const i32 MAX_SESSIONS_PER_KEEPALIVE = 10000 // KeepAliveRequest.sessions
const i64 MAX_LOCK_DELAY_MS = 60000          // lock-delay upper bound
const i64 DEFAULT_LOCK_DELAY_MS = 15000      // lock-delay when a request leaves it unset
const i64 MAX_ACQUIRE_WAIT_MS = 600000       // longest a single Acquire call is parked
const i64 MAX_GET_MASTER_WAIT_MS = 30000     // longest a GetMaster (wait_ms) is held
const i32 MAX_PRINCIPAL_BYTES = 128          // a principal's name (see ACLNames)
const i32 MAX_ACL_ENTRIES = 1000             // principals listed in one ACL file
const i32 MAX_TIMESTAMPS_PER_CALL = 1000000  // GetTimestampsRequest.count
const i32 MAX_MULTI_COMPARES = 64            // MultiRequest.compares
const i32 MAX_MULTI_OPS = 64                 // MultiRequest.ops
// MultiRequest: all contents together. A Multi is one log entry, so a cell
// also refuses (TOO_LARGE) contents that would not fit one entry beside the
// longest paths: with today's 1 MiB entries, over 508,576 bytes.
const i32 MAX_MULTI_BYTES = 1048576
const i32 MAX_READDIR_ENTRIES = 10000        // entries of one ReadDir page (ReadDirRequest.limit)

// ---------------------------------------------------------------------------
// Errors

enum ErrorCode {
    NOT_FOUND = 1            // no node at that path
    EXISTS = 2               // a node already exists at that path
    NOT_EMPTY = 3            // directory has children and recursive was not set
    NOT_DIRECTORY = 4        // a path component (or ReadDir target) is a file
    IS_DIRECTORY = 5         // content operation on a directory
    INVALID_ARGUMENT = 6     // malformed path, field out of range, ...
    TOO_LARGE = 7            // content over MAX_CONTENT_BYTES, or a limit of the cell
    PERMISSION_DENIED = 8    // the handle was not opened for this kind of access
    LOCK_HELD = 9            // TryAcquire found the lock unavailable; lock already held by this handle
    LOCK_NOT_HELD = 10       // Release/GetSequencer on a handle that holds no lock
    SESSION_EXPIRED = 11     // the session is unknown or has ended
    HANDLE_INVALID = 12      // unknown handle, closed, or its node was deleted/re-created
    NOT_MASTER = 13          // this replica is not the master; see master_address
    STALE_EPOCH = 14         // the request names an older master epoch
    UNAVAILABLE = 15         // the cell cannot serve now (starting, overloaded, shutting down); retry
    GENERATION_MISMATCH = 16 // SetContents: expected content generation differs
    TIMED_OUT = 17           // Acquire: the wait deadline passed before the lock was granted
    LIMIT_EXCEEDED = 18      // a per-cell or per-session limit (sessions, handles, waiters, nodes)
    INTERNAL = 19            // a bug: the request may or may not have taken effect
}

exception ChubbyError {
    1: required ErrorCode code
    2: required string message
    3: optional string master_address  // NOT_MASTER: where the master is, if known
    4: optional i64 epoch              // NOT_MASTER/STALE_EPOCH: the current master epoch, if known
}

// ---------------------------------------------------------------------------
// Identifiers. They are typed so that a session id cannot be passed where a
// handle is expected.

typedef i64 SessionID
typedef i64 Epoch

// Handle names one open of one node by one session. instance is the node's
// instance number at Open: a handle to a node that was deleted and re-created
// fails with HANDLE_INVALID instead of touching the new node.
struct Handle {
    1: required i64 id
    2: required SessionID session
    3: required i64 instance
    4: required string path
}

enum LockMode {
    EXCLUSIVE = 1
    SHARED = 2
}

// Sequencer names a held lock: its node (path and instance), its mode and its
// lock generation. A server receiving a request from a lock holder passes the
// sequencer to CheckSequencer (or compares lock generations: a fencing token).
// Its printable form, used by the CLI and the Go client, is
//   chubby-seq:v1:<mode E|S>:<lock_generation>:<instance>:<path>
struct Sequencer {
    1: required string path
    2: required LockMode mode
    3: required i64 lock_generation
    4: required i64 instance
}

// RequestID makes a state-changing request exactly-once across retries and
// failovers. The client numbers its requests per session (1, 2, 3, ...; a
// retry reuses the number) and says which earlier requests it may still
// retry: every request numbered below floor has been answered or abandoned,
// so the cell may forget their answers. A request that repeats a number the
// cell has answered gets that answer again instead of being applied twice
// (Acquire's is used otherwise: see AcquireRequest.rid). Requests without
// one are applied every time they arrive.
struct RequestID {
    1: required i64 seq    // > 0, unique within the session
    2: required i64 floor  // 1..seq
}

// ---------------------------------------------------------------------------
// Nodes

enum NodeKind {
    FILE = 1
    DIRECTORY = 2
}

// LockInfo describes a node's lock at the time of the reply.
struct LockInfo {
    1: optional LockMode mode  // unset: free
    2: required i32 holders
    3: required i32 waiters
    4: required i64 delay_remaining_ms  // >0: the lock is in lock-delay for this long
}

struct Stat {
    1: required string path
    2: required NodeKind kind
    3: required i64 instance            // differs for a re-created node of the same name
    4: required i64 content_generation  // bumped by every write of the content
    5: required i64 lock_generation     // bumped each time the lock goes from free to held
    6: required i64 acl_generation
    7: required i64 checksum            // CRC-32C of the content (0 for directories)
    8: required i64 size                // content bytes; for a directory, its number of children
    9: required i64 create_time_ms      // Unix ms, from the master's clock
    10: required i64 modify_time_ms     // Unix ms, from the master's clock
    11: required bool ephemeral
    12: required SessionID ephemeral_owner  // 0 when permanent
    13: required LockInfo lock
    // The node's ACL names (see ACLNames); unset only from a cell that
    // predates ACLs.
    14: optional ACLNames acl
}

// ACLNames are a node's three access-control lists, as in Chubby: each is
// the name of a file in the directory /acl (one path component) that lists
// the principals holding the right, one per line ("#" starts a comment;
// "*" is every principal with a certificate; "anonymous" is a client
// without one). An empty name grants the right to everybody. A name whose
// file does not exist, or is not a valid ACL file, grants it to nobody.
// A new node gets its parent's names; SetACL changes them and bumps the
// node's acl_generation.
//
// read:       Open, GetContentsAndStat, GetStat, ReadDir, CheckSequencer,
//             and the node's events
// write:      SetContents, Acquire/TryAcquire (locks ask write, as in
//             Chubby); on a directory: creating and deleting its entries
// change_acl: SetACL; on "/": RemoveMember
// (Not "read" and "write": generated Python structs have methods of those
// names.)
struct ACLNames {
    1: required string read_acl
    2: required string write_acl
    3: required string change_acl
}

struct DirEntry {
    1: required string name
    2: required Stat stat
}

// ---------------------------------------------------------------------------
// Events
//
// A handle asks for events at Open (OpenRequest.event_mask). Events are
// replicated state: the master queues them per session, numbered 1, 2, 3...
// (Event.seq), when it applies the change that causes them, so they survive
// a failover. They ride on KeepAlive replies (LeaseGrant.events), in order;
// the client acknowledges the highest seq it received in its next KeepAlive
// (KeepAliveItem.acked_event). Delivery is at least once — a new master may
// send again what the old one sent but was not acknowledged — so a client
// delivers each seq once, in order. A session queues at most a bounded
// number of events; on overflow the oldest are replaced by one EVENTS_LOST.

enum EventKind {
    FILE_CONTENTS_MODIFIED = 1    // the handle's file was written (content_generation)
    CHILD_ADDED = 2               // a node was created in the handle's directory (child)
    CHILD_REMOVED = 3             // a node of the handle's directory was deleted (child)
    CHILD_MODIFIED = 4            // a file in the handle's directory was written (child, content_generation)
    LOCK_ACQUIRED = 5             // the node's lock went from free to held (lock_generation, lock_mode)
    CONFLICTING_LOCK_REQUEST = 6  // the lock this handle holds is wanted by another handle (lock_mode: the mode asked)
    HANDLE_INVALID = 7            // the node was deleted: the handle is invalid from now on
    MASTER_FAILED_OVER = 8        // per session, not numbered (seq 0): a new master serves the session (epoch)
    EVENTS_LOST = 9               // per session: the queue overflowed and events lost_from..seq were dropped; re-read
}

// Bits of OpenRequest.event_mask: the bit of kind k is 1 << (k - 1).
// MASTER_FAILED_OVER and EVENTS_LOST come to every session whatever it asked.
const i32 EVENT_MASK_FILE_CONTENTS_MODIFIED = 1
const i32 EVENT_MASK_CHILD_ADDED = 2
const i32 EVENT_MASK_CHILD_REMOVED = 4
const i32 EVENT_MASK_CHILD_MODIFIED = 8
const i32 EVENT_MASK_LOCK_ACQUIRED = 16
const i32 EVENT_MASK_CONFLICTING_LOCK_REQUEST = 32
const i32 EVENT_MASK_HANDLE_INVALID = 64
const i32 EVENT_MASK_ALL = 127

struct Event {
    1: required i64 seq        // per session, from 1, no gaps; 0 for MASTER_FAILED_OVER
    2: required EventKind kind
    3: required i64 time_ms    // Unix ms, the master's clock when the change was applied
    4: optional i64 handle     // the handle the event is for (per-handle kinds)
    5: optional string path    // that handle's node
    6: optional string child   // CHILD_*: the child's name
    7: optional i64 content_generation  // FILE_CONTENTS_MODIFIED, CHILD_MODIFIED: after the write
    8: optional i64 lock_generation     // LOCK_ACQUIRED: the new holding period; CONFLICTING_LOCK_REQUEST: the one held
    9: optional LockMode lock_mode      // LOCK_ACQUIRED: the mode granted; CONFLICTING_LOCK_REQUEST: the mode asked
    10: optional Epoch epoch            // MASTER_FAILED_OVER: the new master's epoch
    11: optional i64 lost_from          // EVENTS_LOST: the first seq dropped (the last is seq)
}

// ---------------------------------------------------------------------------
// Session service

struct CreateSessionRequest {
    1: required string client_name  // for operators: shown in status; at most MAX_CLIENT_NAME_BYTES
    // The client caches and acknowledges cache invalidations on
    // its KeepAlives. Only such sessions may cache; a new master makes each
    // of them flush before any change commits. Replicated with the session.
    2: optional bool cache
}

struct CreateSessionResponse {
    1: required SessionID session
    2: required i64 lease_ms   // the lease runs from before the request was sent for this long
    3: required Epoch epoch
}

// One session's part of a KeepAlive. acked_event acknowledges the session's
// events: the highest Event.seq the client has received (unset or 0: none).
// The master sends only later events, and may forget these.
struct KeepAliveItem {
    1: required SessionID session
    2: optional i64 acked_event
    // Cache: the highest LeaseGrant.invalidation_seq the client has applied
    // (its cache no longer holds what those invalidations named).
    3: optional i64 acked_invalidation
}

struct KeepAliveRequest {
    1: required list<KeepAliveItem> sessions  // 1..MAX_SESSIONS_PER_KEEPALIVE, distinct
    2: optional Epoch epoch                   // the epoch the client knows; older than the master's → STALE_EPOCH
}

struct LeaseGrant {
    1: required SessionID session
    2: optional ChubbyError error  // SESSION_EXPIRED: that session is over; the others are unaffected
    3: required i64 lease_ms       // new lease, counted from when the request was sent
    // The session's events after its acked_event, in seq order (a bounded
    // number: when more are queued the next KeepAlive is answered at once),
    // preceded by MASTER_FAILED_OVER on the first reply of a new master.
    4: optional list<Event> events
    // Cache invalidations: paths whose cached contents, Stat and
    // listing the client must drop, or invalidate_all (drop everything: a new
    // master, which knows no cachers, or too many to list). invalidation_seq
    // numbers them; the client acknowledges it in acked_invalidation of its
    // next KeepAlive, and the master holds the changes until it has.
    5: optional list<string> invalidations
    6: optional bool invalidate_all
    7: optional i64 invalidation_seq
}

// The master parks a KeepAlive and answers it shortly before the earliest
// lease in it would run out, or at once when a session has ended or has
// events the client has not acknowledged. The client sends the next one as
// soon as a reply arrives, acknowledging the events it received.
struct KeepAliveResponse {
    1: required list<LeaseGrant> results
    2: required Epoch epoch
}

struct CloseSessionRequest {
    1: required SessionID session
    2: optional RequestID rid
}

service Session {
    CreateSessionResponse CreateSession(1: CreateSessionRequest req) throws (1: ChubbyError err)
    KeepAliveResponse KeepAlive(1: KeepAliveRequest req) throws (1: ChubbyError err)
    // CloseSession ends a session at once: its locks are released (no
    // lock-delay, it is a clean release), its handles closed, its ephemeral
    // nodes deleted.
    void CloseSession(1: CloseSessionRequest req) throws (1: ChubbyError err)
}

// ---------------------------------------------------------------------------
// FileSystem service

enum OpenMode {
    READ = 1        // read contents and metadata, take locks
    READ_WRITE = 2  // also write contents and delete
}

enum CreateMode {
    OPEN_EXISTING = 1   // fail with NOT_FOUND if missing
    OPEN_OR_CREATE = 2  // create a file if missing
    CREATE_NEW = 3      // fail with EXISTS if present (always creates with sequential)
}

struct OpenRequest {
    1: required SessionID session
    2: required string path
    3: required OpenMode mode
    4: required CreateMode create
    5: optional bool ephemeral         // on create: deleted when the session ends
    6: optional bool sequential        // on create: append a 10-digit per-parent counter to the name
    7: optional binary initial_content // on create
    8: optional i32 event_mask         // EVENT_MASK_* bits: the events this handle wants (unset or 0: none)
    9: optional RequestID rid
}

struct OpenResponse {
    1: required Handle handle
    2: required Stat stat
    3: required bool created
}

struct CloseRequest {
    1: required Handle handle
    2: optional RequestID rid
}

struct HandleRequest {
    1: required Handle handle
    2: optional RequestID rid  // Release only; reads ignore it
    // GetContentsAndStat: the client wants to cache the answer. The
    // master then registers the session as a cacher of the node and says in
    // the reply whether it may (cacheable).
    3: optional bool cache
}

struct GetContentsAndStatResponse {
    1: required binary content
    2: required Stat stat
    // Set when the request asked to cache and the master will invalidate the
    // session's copy before the node changes. Unset: do not cache (a change
    // is in progress, or a cache limit was reached).
    3: optional bool cacheable
}

// ReadDirRequest asks for one page of a directory's listing: its entries
// after the name after (unset or empty: from the first), in name order, at
// most limit of them (unset or 0: MAX_READDIR_ENTRIES; larger: refused),
// and fewer when their encoding would not fit one reply (the cell keeps
// every reply well under its payload limit, whatever the names and paths).
// Its field ids are HandleRequest's, so a client generated when ReadDir
// took a HandleRequest still calls it (and gets the first page). Field 2
// (HandleRequest.rid, which reads ignore) is not used.
struct ReadDirRequest {
    1: required Handle handle
    // The client wants to cache the answer (as HandleRequest.cache). Only
    // a complete listing in one page (more unset) can be cacheable.
    3: optional bool cache
    4: optional string after  // a cursor: the last name of the previous page
    5: optional i32 limit     // 0..MAX_READDIR_ENTRIES
}

struct ReadDirResponse {
    1: required list<DirEntry> entries  // sorted by name
    2: optional bool cacheable  // as GetContentsAndStatResponse.cacheable
    // more: the directory has entries after this page's last; ask again
    // with after set to its name. Unset: the listing is complete.
    3: optional bool more
    // The directory's content_generation when this page was read: it
    // changes whenever a child is added or removed, so a client that reads
    // the same value on every page of a listing has one consistent set of
    // names (each entry's Stat is as of its own page).
    4: optional i64 content_generation
}

struct SetContentsRequest {
    1: required Handle handle
    2: required binary content
    3: optional i64 expected_generation  // compare-and-swap on content_generation
    4: optional RequestID rid
}

struct DeleteRequest {
    1: required Handle handle
    2: optional bool recursive
    3: optional RequestID rid
}

struct MkdirRequest {
    1: required SessionID session
    2: required string path
    3: optional bool parents    // create missing parents; an existing directory is then not an error
    4: optional bool ephemeral  // deleted when empty after its session ends
    5: optional RequestID rid
}

struct CreateFileRequest {
    1: required SessionID session
    2: required string path
    3: optional binary content
    4: optional bool ephemeral
    5: optional bool sequential
    6: optional bool make_parents  // create missing parent directories (permanent)
    7: optional RequestID rid
}

struct SetACLRequest {
    1: required Handle handle
    2: required ACLNames acl
    3: optional i64 expected_acl_generation  // compare-and-swap on acl_generation
    4: optional RequestID rid
}

// Atomic multi-operation. A MultiRequest is one command: its compares are
// checked against the state, and if every one holds its ops are applied in
// order, all or nothing; if a compare does not hold, nothing is applied and
// the answer says which (succeeded = false: an answer, not an error). An op
// that cannot be applied (its parent is missing, the node exists, a right
// is lacking, a limit is reached...) refuses the whole request with that
// op's error, naming its index, and nothing changes. Each op has the rights,
// events and cache invalidations of the single call it stands for (CREATE:
// CreateFile or Mkdir; SET_CONTENTS: SetContents; DELETE: Delete); a compare
// needs the read right on its node (NOT_EXISTS: on the nearest existing
// ancestor). Later ops see the effects of earlier ones (create a directory,
// then a file in it). Exactly-once under rid like the single calls.

enum CompareKind {
    EXISTS = 1              // the node exists
    NOT_EXISTS = 2          // it does not
    CONTENT_GENERATION = 3  // it exists with content_generation == value
    INSTANCE = 4            // it exists with instance == value
}

struct Compare {
    1: required string path
    2: required CompareKind kind
    3: optional i64 value  // CONTENT_GENERATION, INSTANCE
}

enum MultiOpKind {
    CREATE = 1        // a file (content) or, with directory, a directory; EXISTS if present
    SET_CONTENTS = 2  // replace a file's content (expected_generation: compare-and-swap)
    DELETE = 3        // delete a node (recursive for a non-empty directory)
}

struct MultiOp {
    1: required MultiOpKind kind
    2: required string path
    3: optional binary content            // CREATE of a file, SET_CONTENTS
    4: optional bool directory            // CREATE
    5: optional bool ephemeral            // CREATE: owned by the request's session
    6: optional bool recursive            // DELETE
    7: optional i64 expected_generation   // SET_CONTENTS
}

struct MultiRequest {
    1: required SessionID session
    2: required list<Compare> compares  // at most MAX_MULTI_COMPARES
    3: required list<MultiOp> ops       // at most MAX_MULTI_OPS; contents together at most MAX_MULTI_BYTES
    4: optional RequestID rid
}

struct MultiResponse {
    1: required bool succeeded
    2: optional i32 failed_compare   // !succeeded: the index of the first compare that did not hold
    3: required list<Stat> stats     // succeeded: per op, the node's Stat after it (DELETE: its Stat before)
}

service FileSystem {
    OpenResponse Open(1: OpenRequest req) throws (1: ChubbyError err)
    // Close closes a handle; a lock it holds is released and a pending Acquire fails.
    void Close(1: CloseRequest req) throws (1: ChubbyError err)
    GetContentsAndStatResponse GetContentsAndStat(1: HandleRequest req) throws (1: ChubbyError err)
    Stat GetStat(1: HandleRequest req) throws (1: ChubbyError err)
    // ReadDir lists one page of a directory (see ReadDirRequest).
    ReadDirResponse ReadDir(1: ReadDirRequest req) throws (1: ChubbyError err)
    Stat SetContents(1: SetContentsRequest req) throws (1: ChubbyError err)
    void Delete(1: DeleteRequest req) throws (1: ChubbyError err)
    Stat Mkdir(1: MkdirRequest req) throws (1: ChubbyError err)
    // CreateFile creates a file in one call (no handle); the Stat names the
    // path actually created (with the counter when sequential).
    Stat CreateFile(1: CreateFileRequest req) throws (1: ChubbyError err)
    // SetACL replaces the node's ACL names (change_acl right on the node).
    Stat SetACL(1: SetACLRequest req) throws (1: ChubbyError err)
    // Multi checks its compares and, if all hold, applies its ops, all or
    // nothing, as one command (see MultiRequest).
    MultiResponse Multi(1: MultiRequest req) throws (1: ChubbyError err)
}

// ---------------------------------------------------------------------------
// Lock service

struct AcquireRequest {
    1: required Handle handle
    2: required LockMode mode
    3: required i64 wait_ms        // 1..MAX_ACQUIRE_WAIT_MS; TIMED_OUT when it passes
    4: optional i64 lock_delay_ms  // 0..MAX_LOCK_DELAY_MS; unset: DEFAULT_LOCK_DELAY_MS
    // The call's request number, numbered like the exactly-once calls'.
    // Acquire is not answered from the request table (a waiting request's
    // answer would outlive the failover that withdraws it): the master
    // uses seq only to recognise a resend of the call parked for the
    // handle, which then takes the parked call's place (the request keeps
    // its place in the lock's queue).
    5: optional RequestID rid
}

struct TryAcquireRequest {
    1: required Handle handle
    2: required LockMode mode
    3: optional i64 lock_delay_ms
    4: optional RequestID rid
}

struct CheckSequencerRequest {
    1: required Sequencer sequencer
}

struct CheckSequencerResponse {
    1: required bool valid
    2: required string reason  // why not, when not valid
}

service Lock {
    // Acquire waits (in FIFO order with other waiters) until the lock is
    // granted, wait_ms passes (TIMED_OUT), or the handle/session ends.
    Sequencer Acquire(1: AcquireRequest req) throws (1: ChubbyError err)
    // TryAcquire never waits: LOCK_HELD when the lock is not available now.
    Sequencer TryAcquire(1: TryAcquireRequest req) throws (1: ChubbyError err)
    void Release(1: HandleRequest req) throws (1: ChubbyError err)
    Sequencer GetSequencer(1: HandleRequest req) throws (1: ChubbyError err)
    // CheckSequencer needs no session: downstream servers call it.
    CheckSequencerResponse CheckSequencer(1: CheckSequencerRequest req) throws (1: ChubbyError err)
}

// ---------------------------------------------------------------------------
// Cell service

struct GetMasterRequest {
    // unreachable: a replica address the caller failed to reach just now
    // (the master it was using). A replica that still believes that address
    // is the master holds the answer until its view changes (it detects the
    // failure and a new master is chosen) or 200 ms pass, so the caller
    // learns of the new master when there is one instead of polling.
    1: optional string unreachable
    // wait_ms, with unreachable: hold the answer until this replica knows
    // a master other than unreachable (or serves as master itself), for
    // up to wait_ms instead of 200 ms; 0..MAX_GET_MASTER_WAIT_MS. A
    // client parks one such call at a replica that is not its master (a
    // master watch), so that it hears of a new master within moments of
    // the view change even when the old master falls silent (paused, cut
    // off) and its own calls there just hang. Answered as without it when
    // unreachable is unset.
    2: optional i64 wait_ms
}

struct GetMasterResponse {
    1: required string master_address
    2: required Epoch epoch
    3: required string master_id
    // replicas: the client addresses of every member of the configuration
    // in force (voters and learners), so that a client given one address
    // learns the others and follows the cell as it changes.
    4: optional list<string> replicas
}

enum ReplicaRole {
    MASTER = 1
    REPLICA = 2
    RECOVERING = 3
    UNREACHABLE = 4
}

struct ReplicaStatus {
    1: required string id
    2: required string address
    3: required ReplicaRole role
    4: required i64 committed_op
    // membership: "voter", "learner" (in the configuration, votes in
    // nothing), "spare" (discovered by gossip, not in the configuration).
    5: optional string membership
    // gossip_state: what memberlist says of it ("alive", "suspect",
    // "dead", "left"; absent without gossip).
    6: optional string gossip_state
    // behind: entries the master has committed that it has not
    // acknowledged; last_contact_ms: since the master last heard from it
    // (-1: not in this master's view). Set by the master only.
    7: optional i64 behind
    8: optional i64 last_contact_ms
    9: optional string peer_address
}

struct CellStatus {
    1: required string cell
    2: required string master_id
    3: required string master_address
    4: required Epoch epoch
    5: required list<ReplicaStatus> replicas
    6: required i64 sessions
    7: required i64 nodes
    8: required i64 handles
    9: required i64 locks_held
    10: required i64 committed_op
    11: required i64 uptime_ms
    12: required string version
    // The configuration: its epoch (one per voter change), the log index
    // of a voter change not yet committed (0: none), the size the master
    // grows the cell to, and the master's recent membership decisions,
    // newest last.
    13: optional i64 config_epoch
    14: optional i64 pending_config
    15: optional i32 target_size
    16: optional list<string> decisions
    // security: how the client port authenticates ("mutual TLS" or
    // "PLAINTEXT: ..."), and whether ACLs were initialised (--admin).
    17: optional string security
}

struct WhoAmIResponse {
    1: required string principal  // "anonymous" without a client certificate
    2: required bool tls          // the call came over TLS
}

struct RemoveMemberRequest {
    1: required string id
}

struct RemoveMemberResponse {
    // index: the log index of the configuration change, which has
    // committed: the replica is out of the configuration.
    1: required i64 index
}

// SnapshotRead reads a backup of the cell (chubbyfs snapshot save): a
// snapshot of the whole state the master stores on its disk, in chunks.
struct SnapshotReadRequest {
    // index 0 starts a backup: the master stores a snapshot of its state
    // as it is now (as it does every few thousand commands, off its loop)
    // and answers with chunk 0 of it. Then the caller asks for chunks
    // 1..chunks-1 of that index. The master keeps the snapshot while
    // reads come at least every 30 s (unless another backup starts, or
    // its log grows to four snapshot intervals meanwhile).
    1: required i64 index
    2: required i32 chunk
}

struct SnapshotReadResponse {
    1: required string cell
    2: required i64 index      // the log index the snapshot was taken at
    3: required i32 chunks     // how many chunks it has
    4: required i64 length     // its length in bytes, all chunks
    5: required i64 checksum   // CRC-32C of the whole snapshot
    6: required i32 chunk      // this chunk's number
    7: required binary data    // this chunk (at most 1 MiB)
    8: required i32 snapshot_version // the fs snapshot's format version (fsm.Snapshot.version); in chunk 0 only (0 in the others)
    9: required i32 layout_version   // the master's data directory format version
    10: required i32 command_version  // the master's log entry format version
    11: required string master_id
}

service Cell {
    // GetMaster names the master. During a view change a replica holds the
    // answer until it knows the new master, at most 200 ms (then
    // UNAVAILABLE), or wait_ms when the request sets it; req may be absent.
    GetMasterResponse GetMaster(1: GetMasterRequest req) throws (1: ChubbyError err)
    CellStatus GetStatus() throws (1: ChubbyError err)
    // RemoveMember takes a replica out of the configuration (an operator's
    // forced removal: the master never removes a live voter by itself). A
    // voter is removed in its own configuration change; the master
    // refuses to remove the last voter. Answered by the master only, and
    // only once the change has committed (the answer's index). Errors:
    // UNAVAILABLE whose message starts "outcome unknown: " when the change
    // was proposed but is not known committed by the call's deadline (at
    // most 5 s; a master cut off from the others): it may still take
    // effect, GetStatus (chubbyfs members) shows whether it did. Any other
    // error is a refusal and nothing changed: NOT_FOUND, INVALID_ARGUMENT
    // (a malformed id, the last voter), PERMISSION_DENIED, NOT_MASTER,
    // UNAVAILABLE (another change in progress, or this one lost in a view
    // change before it committed: retry).
    RemoveMemberResponse RemoveMember(1: RemoveMemberRequest req) throws (1: ChubbyError err)
    // WhoAmI says which principal the cell takes the caller for.
    WhoAmIResponse WhoAmI() throws (1: ChubbyError err)
    // SnapshotRead reads a chunk of a backup (see SnapshotReadRequest).
    // It reveals every file, so it needs change_acl on "/" (as
    // RemoveMember). Answered by the master only. Errors: NOT_FOUND when
    // the snapshot of that index is gone (replaced after 30 s without a
    // read, or another master answers now: start again with index 0),
    // INVALID_ARGUMENT (a chunk out of range), PERMISSION_DENIED,
    // NOT_MASTER, UNAVAILABLE.
    SnapshotReadResponse SnapshotRead(1: SnapshotReadRequest req) throws (1: ChubbyError err)
}

// ---------------------------------------------------------------------------
// Oracle: strictly increasing 64-bit timestamps, as Percolator's timestamp
// oracle gives them. Every timestamp the cell hands out is larger than every
// one it handed out before the request was sent, across failovers and
// restarts (the master reserves them in windows through the log and serves
// from memory, under its master lease), and none is handed out twice. They
// are counters, not clock readings. Answered by the master only.

struct GetTimestampsRequest {
    1: required i32 count  // 1..MAX_TIMESTAMPS_PER_CALL
}

struct GetTimestampsResponse {
    1: required i64 first  // the timestamps are first .. first+count-1
    2: required i32 count
    3: required Epoch epoch
}

service Oracle {
    GetTimestampsResponse GetTimestamps(1: GetTimestampsRequest req) throws (1: ChubbyError err)
}
