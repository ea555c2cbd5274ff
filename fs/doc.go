// Package fs is the replicated state machine of a Chubby lock cell: the
// namespace of files and directories with their metadata, the locks on them,
// sessions, handles and ephemeral ownership.
//
// # Determinism
//
// A State changes only through Apply (or ApplyBytes), one fsm.Command at a
// time, in log order. It has no clock, no randomness, no goroutines and no
// I/O: time comes only from Command.time_ms, which the master stamps. The
// same commands applied in the same order to New(l) give the same State, byte
// for byte (Snapshot), and the same Results and Effects. A State is not safe
// for concurrent use; the caller serializes Apply and the reads. All
// replicas of a cell must run with the same Limits.
//
// The state's clock is the largest time_ms applied so far: a command stamped
// earlier (a new master's clock a little behind) is applied at the current
// clock. A command whose time_ms is outside 0..MaxTimeMs is refused before
// the clock moves.
//
// # Commands and results
//
// Apply never panics on any input (it is fuzzed); it panics only when an
// internal invariant is broken. A refused command returns Result.err, a
// *chubby.ChubbyError with a code, and changes nothing — except that the
// clock advanced to its time_ms, as for a Tick, and that a TryAcquire
// refused with LOCK_HELD queues CONFLICTING_LOCK_REQUEST for the holders
// (see "Events"), and that a sequenced command refused by its operation
// saves that refusal as its answer and raises its session's floor (see
// "Exactly-once"). The first fault found is
// reported, in the order: arguments, session, handle, permission, state
// (Multi: see "Atomic multi-operation").
// Errors from the read methods are *chubby.ChubbyError too; Errorf builds
// them and Code extracts the code from any error.
//
// Results per operation:
//
//	CreateSession  session
//	EndSession     (empty)
//	Open           handle, stat, created
//	Close          (empty)
//	SetContents    stat
//	Delete         (empty)
//	Mkdir          stat (the directory), created (false: it existed, with parents)
//	CreateFile     stat (path with the counter when sequential), created
//	Acquire        sequencer (granted now) or waiting=true (queued)
//	Release        (empty)
//	CancelWait     sequencer if the handle holds the lock, else empty
//	Tick           (empty)
//	TrimEvents     (empty)
//	SetACL         stat
//	InitACL        (empty)
//	ReserveTimestamps  timestamps_reserved (the high-water mark after it)
//	Multi          multi: succeeded and a Stat per op, or failed_compare
//
// Results, Effects and everything the read methods return are freshly
// allocated: the caller owns them and may keep or change them.
//
// Effects report what a command did to others: Woken lists pending Acquires
// it granted (with their sequencer) or failed (with an error), in order;
// EndedSessions lists the sessions it ended; Notified lists the sessions it
// queued events for. They are derived data for the master, not replicated
// state.
//
// # Paths
//
// A path is absolute: "/" is the root, otherwise "/"-separated components,
// no empty component, no trailing slash. A component is 1 to
// chubby.MAX_NAME_BYTES bytes of [A-Za-z0-9._-] and not "." or "..". At
// most chubby.MAX_PATH_DEPTH components and chubby.MAX_PATH_BYTES bytes. A
// bad path is INVALID_ARGUMENT. ParsePath checks; CleanPath is the lenient
// form for people (collapses slashes, resolves dots) and is never applied
// by commands.
//
// # Nodes
//
// A node is a file or a directory, permanent or ephemeral. The root is a
// permanent directory that always exists; it cannot be deleted
// (INVALID_ARGUMENT) but can be opened, listed and locked.
//
// Metadata (chubby.Stat):
//   - instance: from a cell-wide counter, new at every creation, so a
//     re-created node differs from the old one;
//   - content_generation: 1 at creation, +1 on every SetContents (even of
//     identical bytes). For a directory, +1 whenever an entry is added or
//     removed: its content is its listing, so caches can validate listings;
//   - lock_generation: +1 each time the lock goes from free to held (shared
//     holders granted together, or joining holders, share one generation);
//   - acl_generation: +1 on every SetACL (even of identical names), and on
//     each node InitACL names (see "Access control");
//   - acl: the node's three ACL names, always set (see "Access control");
//   - checksum: CRC-32C (Castagnoli) of the content, 0 for directories;
//   - size: content bytes; for a directory, its number of entries;
//   - create/modify time: the clock at creation / last change (a directory's
//     modify time moves when an entry is added or removed);
//   - ephemeral, ephemeral_owner: the owning session, 0 when permanent;
//   - lock: mode (unset when free), holders, waiters and delay_remaining_ms
//     counted from the state's clock.
//
// Content is at most Limits.MaxContentBytes (TOO_LARGE); content
// calls on a directory are IS_DIRECTORY. A new node's parent must exist
// (NOT_FOUND) and be a directory (NOT_DIRECTORY), unless make-parents asks
// for the missing directories, which are created permanent whatever the
// ephemeral flag says (it applies to the last component only).
//
// Sequential: the name gets a 10-digit zero-padded counter appended
// ("lock-" becomes "lock-0000000000", then "lock-0000000001"...). The counter
// belongs to the parent directory, starts at 0 and only grows (ZooKeeper
// style): it is never reused after deletes, and it skips names that already
// exist (created by hand), so a sequential create never fails with EXISTS.
// The name with its counter must still fit chubby.MAX_NAME_BYTES and the
// path chubby.MAX_PATH_BYTES (INVALID_ARGUMENT). A sequential create always creates, whatever the
// create mode. The result (Stat.path, Handle.path) carries the actual name.
//
// Ephemeral nodes: an ephemeral file is deleted when its owner session ends,
// even if other sessions have it open (their handles become invalid). An
// ephemeral directory is kept while its owner session lives, even when
// empty; when the session ends it is deleted if empty, else it stays as an
// orphan and is deleted as soon as it becomes empty. Nodes of any kind and
// owner may be created inside an ephemeral directory. (Chubby also deletes,
// after a failover grace period, ephemeral files no handle reopened; that
// decision is the master's and needs no rule here.)
//
// # Sessions
//
// CreateSession (client_name at most chubby.MAX_CLIENT_NAME_BYTES) returns
// a new id from a counter; ids are never reused. The session acts as Command.principal,
// which the master sets from the client's certificate: unset, Anonymous;
// set, it must pass ValidPrincipal (INVALID_ARGUMENT). No other command
// carries a principal (INVALID_ARGUMENT): a session's commands act as its
// principal, and commands without a session are the system's. EndSession{expired} ends one: its pending
// Acquires fail (Effects.Woken, SESSION_EXPIRED); its locks are released —
// expired: with lock-delay, exclusive and shared alike, of each hold's
// lock_delay_ms; a clean close (expired=false): at once; its handles are
// closed; its ephemeral nodes are deleted as above; the freed locks go to
// the waiters; the session appears in Effects.EndedSessions. Every command
// naming an ended or unknown session, directly or through a handle, is
// SESSION_EXPIRED. Lease timing is the master's: it proposes EndSession.
//
// # Handles
//
// Open creates a handle (id from a counter) of a session on a node, with an
// open mode (READ: read and lock; READ_WRITE: also SetContents and Delete,
// else PERMISSION_DENIED; on top of the rights of "Access control") and an event mask (chubby.EVENT_MASK_* bits; other
// bits are INVALID_ARGUMENT; see "Events"). Create
// modes: OPEN_EXISTING (NOT_FOUND if missing; ephemeral, sequential and
// initial_content are INVALID_ARGUMENT with it), OPEN_OR_CREATE (creates a
// file if missing; the creation flags are ignored when the node exists),
// CREATE_NEW (EXISTS if present). Open of a directory is allowed (for
// ReadDir, Delete and locks); Open never creates a directory.
//
// A handle names its node by path and instance. Every command and read
// checks: the session is alive (SESSION_EXPIRED), the handle exists with
// that session, path and instance (HANDLE_INVALID), and its node still
// exists (HANDLE_INVALID) — a handle to a deleted or re-created node is
// invalid for everything except Close, which always works on an existing
// handle. Close releases a held lock cleanly (no lock-delay) and fails a
// pending Acquire of the handle (Effects.Woken, HANDLE_INVALID).
//
// Delete works through a READ_WRITE handle. A non-empty directory needs
// recursive (NOT_EMPTY otherwise); recursive deletes the subtree children
// first, in name order. Each deleted node takes its lock with it: holders
// lose it (their handles are invalid now anyway), waiters are woken with
// HANDLE_INVALID, a pending lock-delay is dropped.
//
// Mkdir creates a directory; with parents, missing parents are created and
// an existing directory is not an error (created=false); an existing file
// is always EXISTS. CreateFile creates a file without a handle (EXISTS if
// present). SetContents replaces the content; with expected_generation it is
// a compare-and-swap on content_generation (GENERATION_MISMATCH).
//
// # Locks
//
// Every node has an advisory reader/writer lock, held through a handle:
// EXCLUSIVE (one holder) or SHARED (any number). Acquire{wait:false} is
// TryAcquire: granted now or LOCK_HELD. Acquire{wait:true} is granted now or
// queued (Result.waiting) and decided later through Effects.Woken. The queue
// is strict FIFO: a new request is granted at once only if nobody waits,
// the lock is not in lock-delay and the request is compatible (shared with
// shared); otherwise it queues behind, so a stream of readers cannot starve
// a writer. Whenever the lock frees or the head of the queue changes, the
// head is granted as far as possible: one exclusive request, or every
// consecutive shared request at the head; only those are woken (no herd).
//
// A handle that already holds or waits gets LOCK_HELD on Acquire (locks are
// not re-entrant per handle; open another handle). lock_delay_ms must be in
// 0..chubby.MAX_LOCK_DELAY_MS (INVALID_ARGUMENT); the master fills the
// default. At most Limits.MaxWaitersPerLock waiters (LIMIT_EXCEEDED).
// Release by a handle that does not hold is LOCK_NOT_HELD (waiting is not
// holding: use CancelWait). The master enforces Acquire wait deadlines by
// proposing CancelWait: a still-waiting request is removed and woken with
// TIMED_OUT; if the grant won the race, nothing changes and the Result
// carries the sequencer.
//
// Lock-delay: when a holder's session ends expired, the lock stays
// unavailable until the clock reaches the end time plus that holder's
// lock_delay_ms (the longest, if several shared holders expire). During the
// delay no new request is granted, shared or exclusive: TryAcquire gets
// LOCK_HELD, Acquire queues; remaining shared holders keep holding. Every
// command first advances the clock and ends the delays that are over,
// granting their queues, so a Tick is only "advance time"; NextTimer tells
// the master when to propose one. A clean release, Close, or clean session
// end has no lock-delay.
//
// Sequencer {path, mode, lock_generation, instance} names a held lock.
// GetSequencer returns it for a holding handle (LOCK_NOT_HELD otherwise).
// CheckSequencer is valid iff the node at path exists with that instance and
// its lock is held in that mode with that generation (its caller needs the
// read right on the node). A shared sequencer
// names the holding period, not one holder: it stays valid while any shared
// holder of that generation holds. After an expiry the lock is free (and
// then re-granted with a new generation), so the old holder's sequencer
// fails and the new holder's passes.
//
// # Access control
//
// As in Chubby, every node has three ACL names (Stat.acl), one per Right:
// read, write and change_acl. Each is empty or one path component (the
// rule of "Paths"); a name N refers to the ACL file /acl/N, a file directly
// in the directory /acl. An empty name grants its right to everybody, so a
// cell nobody configured — no names anywhere — lets everybody do
// everything, as before ACLs. A name whose file is missing, is a
// directory, or does not parse grants its right to nobody. Rights are
// checked on the node itself, never on its ancestors.
//
// A new node — by an Open that creates, CreateFile, Mkdir, and each
// directory make-parents creates — copies its parent's names. SetACL,
// through a handle of any open mode, replaces them: the names must be valid (INVALID_ARGUMENT); with
// expected_acl_generation it is a compare-and-swap on acl_generation
// (GENERATION_MISMATCH); it bumps acl_generation and changes nothing else
// (no content_generation, no modify time, no event). It is exactly-once
// like SetContents.
//
// An ACL file (ParseACL) is text: lines split on '\n' (a trailing '\r'
// trimmed), each trimmed of spaces and tabs; empty lines and lines
// starting with '#' are ignored; every other line is one entry, a
// principal (ValidPrincipal) or "*", at most chubby.MAX_ACL_ENTRIES of
// them. "*" grants every principal but Anonymous, which is granted only
// when "anonymous" is listed. Content that does not parse is refused
// (INVALID_ARGUMENT, naming the line and why) when written at an ACL
// file's place — by SetContents, CreateFile, or Open's initial_content
// (even when the file exists, as for its size) — so that a typo cannot
// lock the admin out; a file written before the rule grants nobody until
// it is rewritten. The parsed content of every ACL file is kept with it,
// in step with every write, delete and re-create, so a check never
// parses; it is derived, not part of the snapshot.
//
// A command acts as its session's principal (see "Sessions"), a read
// through a handle as the principal of the handle's session, and
// CheckSequencer as the principal its caller names. Tick, TrimEvents,
// InitACL, and the EndSession and CancelWait the master proposes are the
// system's and need no right. A principal without the right is refused
// with PERMISSION_DENIED, naming the principal, the node's path, the right
// and the ACL name (and why that name grants nobody, when it does), and
// the command changes nothing, as every refusal. The rights:
//   - Open: read on the node, and write for READ_WRITE (the open mode is a
//     further restriction of the handle). An Open that creates needs write
//     on the directory, and read (and write for READ_WRITE) on the node
//     as it will be, with the names it will inherit, all checked before
//     anything changes;
//   - GetContentsAndStat, GetStat, ReadDir: read on the node;
//     CheckSequencer: read on the node named (an error; a node that does
//     not exist is just not valid); GetSequencer: none;
//   - SetContents: write on the node;
//   - Delete: write on the node's directory; recursive, also write on
//     every directory in the subtree whose entries it removes (every one
//     with entries, the node included);
//   - Mkdir, CreateFile: write on the directory created in (with
//     make-parents, the deepest existing ancestor). Mkdir with parents of
//     an existing directory: read on it. A create refused with EXISTS
//     first needs write on the existing node's directory, as the create
//     would have;
//   - Acquire, waiting or not: write on the node (Chubby asks write for
//     locks). Release, CancelWait, Close, EndSession: none;
//   - SetACL: change_acl on the node;
//   - Multi: each op the rights of the single call it stands for, each
//     compare read on its node (see "Atomic multi-operation");
//   - State.Allowed checks a right for the master's own decisions
//     (RemoveMember: change_acl on "/").
//
// In the fault order, permission comes after the handle and before the
// state: the faults found while resolving a path (NOT_FOUND,
// NOT_DIRECTORY) come first, since they decide whose right is checked;
// the cell's limits and the node's state (EXISTS, NOT_EMPTY,
// IS_DIRECTORY, LOCK_HELD, GENERATION_MISMATCH...) after. Events need the
// read right too (see "Events").
//
// InitACL{admin} gives a cell nobody configured its first administrator
// (chubbyd --admin). admin must pass ValidPrincipal (INVALID_ARGUMENT).
// If "/" has no names and /acl does not exist, it creates the permanent
// directory /acl and the permanent file /acl/admin with content admin
// followed by a newline (queueing the create events as for any create;
// LIMIT_EXCEEDED if the cell is full), then names "admin" for all three
// rights of "/", /acl and /acl/admin, each at acl_generation 1.
// Otherwise it changes nothing, and is not an error — unless recover is
// set and the cell is locked out (below): then it gives admin back the
// cell: /acl is created if missing, /acl/admin is created (permanent,
// listing admin) or rewritten to its valid entries plus admin, and "/",
// /acl and /acl/admin name "admin" for change_acl (their other names
// stay), each acl_generation bumped. It refuses (INVALID_ARGUMENT,
// changing nothing) when /acl is a file or /acl/admin a directory or
// ephemeral. The master proposes it with recover for chubbyd --admin.
//
// No lock-out: change_acl on "/" and /acl is how rights are given back,
// so a command may not leave either without a principal holding it
// (State.LockOut says when one has none). Somebody holds it when the
// change_acl name is empty, or its ACL file exists, is a permanent file
// (an ephemeral one goes with its session), parses and has at least one
// entry ("*" and "anonymous" count). A SetContents, Delete or SetACL
// through a handle on "/", /acl or under /acl, and each op of a Multi,
// that would leave "/" or /acl (if it exists) without one — deleting or
// emptying the ACL file they name, deleting /acl, SetACL naming a missing,
// empty, ephemeral or invalid file — is refused with PERMISSION_DENIED
// ("refused: nobody could change ACLs any more: ..." naming the node and
// the file), after every other check, and changes nothing. An empty ACL
// file that neither names stays allowed: it grants nobody, as documented.
// A state locked out already (from before this rule) is not held to it;
// InitACL with recover is its way back.
//
// # Atomic multi-operation
//
// Multi (chubby.MultiRequest) checks its compares against the state and,
// if every one holds, applies its ops in order, as one command: all or
// nothing. It names its session, and is exactly-once under seq like
// SetContents. Its faults come in this order:
//   - arguments (INVALID_ARGUMENT unless said): at most
//     chubby.MAX_MULTI_COMPARES compares and 1..chubby.MAX_MULTI_OPS ops.
//     A compare has a kind, a valid path, and a value exactly when its
//     kind is CONTENT_GENERATION or INSTANCE. An op has a kind, a valid
//     path and only the fields of its kind: directory and ephemeral for
//     CREATE, content for CREATE of a file and SET_CONTENTS (empty content
//     counts as none), expected_generation for SET_CONTENTS, recursive for
//     DELETE; "/" cannot be deleted; a content is at most
//     Limits.MaxContentBytes (TOO_LARGE) and, at an ACL file's place, must
//     parse as one; the contents together at most chubby.MAX_MULTI_BYTES
//     (TOO_LARGE). The fault names the compare or op: "compare 1: ...",
//     "op 0: ...";
//   - the session: alive (SESSION_EXPIRED);
//   - the compares' rights: each needs the read right of the session's
//     principal on its node or, when there is none, on the nearest
//     existing ancestor of its path (a file, when the path goes through
//     one), so that a compare tells nothing its principal could not read.
//     Every compare is checked before any is evaluated; a refusal is
//     PERMISSION_DENIED naming the compare;
//   - the compares, in order, against the state before any op: EXISTS
//     holds when a node is at the path, NOT_EXISTS when none is,
//     CONTENT_GENERATION and INSTANCE when one is whose content_generation
//     or instance is the value. The first that does not hold is the answer:
//     Result.multi with succeeded false, failed_compare its index and no
//     stats, and nothing applied. It is an answer, not a refusal (saved
//     under exactly-once like any);
//   - the ops, in order, each exactly as the single call it stands for,
//     with its rights, faults, messages, events and effects: CREATE is
//     CreateFile{content, ephemeral}, or Mkdir{ephemeral} with directory,
//     without make-parents or sequential names; SET_CONTENTS is
//     SetContents{content, expected_generation} of the node at the path,
//     DELETE is Delete{recursive} of it, without a handle (no open mode:
//     the rights decide; no node there is NOT_FOUND, or NOT_DIRECTORY).
//     Each op applies to the state the earlier ones left: a directory
//     made, then a file created in it; a node deleted, then created again;
//     an ACL file rewritten, then the rights it grants; room made under a
//     limit, or taken. The lock-out rule (see "Access control") holds
//     after each op, as it would after each single call.
//
// An op refused refuses the whole command with that op's error, its
// message prefixed with "op N: ", and nothing changes: no node, content,
// lock, event or counter, as for any refused command. When all apply,
// Result.multi has succeeded true and one Stat per op: the node's after
// the op (a later op may change it further), for DELETE the node's just
// before it. The events are those of the ops, queued in op order;
// Effects.Woken lists the waiters of the deleted nodes' locks in op order.
//
// # Exactly-once
//
// A command with Command.session and seq > 0 is deduplicated per session,
// with any number of the session's requests in flight and applied in any
// order. seq is the client's request number (chubby.RequestID.seq: unique
// within the session, reused by retries) and seq_floor its promise
// (RequestID.floor): every request numbered below it has been answered or
// abandoned and will not be retried. seq_floor must be in 1..seq
// (INVALID_ARGUMENT); unset, it is seq itself — the client has nothing else
// in flight, which is the one-request-at-a-time client of old. Each session
// keeps a floor (1 at creation) and the saved answers of its requests at or
// above it. In this order:
//   - seq below the session's floor is INVALID_ARGUMENT ("request already
//     finished (below the session's floor)"): the client said it would not
//     retry it, and its answer may be gone;
//   - seq already answered returns the saved Result again and applies
//     nothing (a retried sequential CreateFile creates no second file, a
//     retried SetContents bumps no generation, a retried Acquire returns its
//     original outcome, e.g. waiting=true, even if it has been granted since;
//     the grant was reported in Effects.Woken); nor does it raise the floor;
//   - otherwise, if the session already keeps Limits.MaxSavedAnswersPerSession
//     answers at or above max(its floor, seq_floor), the command is
//     LIMIT_EXCEEDED ("too many requests in flight; raise your floor") and
//     changes nothing: an answer a client may still retry is never dropped
//     to make room. This is checked before the operation, so it takes
//     precedence over the operation's own faults;
//   - otherwise the command is applied, and its Result is saved under seq
//     whether it succeeded or was refused (GENERATION_MISMATCH, LOCK_HELD,
//     NOT_FOUND, ...); then the session's floor rises to seq_floor if that
//     is higher (it never goes down: requests apply out of order) and the
//     answers below the new floor are forgotten.
//
// Refusals are saved because the first application decides the request's
// outcome, and every later copy must get that same answer. A client whose
// first attempt timed out sends the same seq again; if the retry is applied
// first and refused, the client takes the refusal as the answer, and the
// first attempt, still queued, must not then succeed (it would find the
// state changed in between, e.g. the generation it expects now current):
// the operation would take effect after the client was told it was refused,
// which is not linearizable. So the saved refusal is returned to it
// instead, and it changes nothing. A saved refusal takes room among the
// saved answers and raises the floor like a success.
//
// Not saved are the refusals checked before the operation, in the order
// above: a malformed seq or seq_floor, a seq below the floor, the session
// checks below, and LIMIT_EXCEEDED for too many answers in flight. They say
// nothing about the request's effect, and a later copy gets its own
// outcome. For most this is safe because the refusal is permanent: a seq
// below the floor stays below it (the floor never goes down), an ended
// session never returns (ids are not reused), and malformed numbers or a
// session mismatch are refused for every copy that carries them (a client
// bug in any case). LIMIT_EXCEEDED is not permanent: the floor rising
// (another request's seq_floor) makes room, and a copy of the same seq
// applied then succeeds. It therefore is not a final answer: a client must
// treat it like a timeout, as "not applied yet, outcome unknown" while any
// earlier copy of the request may still be in flight, and either retry the
// same seq (after raising its floor) or keep treating the request as
// possibly applied; it must never report it to its caller as a refusal of
// the operation. Saving it instead would not help: the limit exists to
// bound the record, and a saved LIMIT_EXCEEDED would refuse the request
// forever even though nothing was wrong with it.
//
// Request numbers need not be dense or in order: 5 may apply before
// 4, and then 4 is applied when it comes (if the floor has not passed it).
// Command.seq needs Command.session, and seq_floor needs seq
// (INVALID_ARGUMENT); Command.session must match the session the operation
// names (INVALID_ARGUMENT), must be alive (SESSION_EXPIRED), and is not
// allowed on CreateSession and Tick. The record (floor and answers) is part
// of the snapshot and ends with the session. Commands without seq are
// applied every time. CreateSession cannot be deduplicated here (there is
// no session yet): a retried CreateSession makes a second session, which
// the master lets expire if the client never uses it.
//
// # Events
//
// Events are replicated state, generated here when commands apply, so that
// every replica has the same queues and a new master delivers what the
// old one had not. Each session has a queue of events numbered
// 1, 2, 3... (per session, no gaps). A command queues an event for every
// live handle whose event mask has the kind's bit (chubby.EVENT_MASK_*:
// 1 << (kind-1)), in this order within the command's changes, and across
// the handles of one change in ascending handle id:
//   - FILE_CONTENTS_MODIFIED, for the handles on a file SetContents wrote
//     (content_generation after the write), then CHILD_MODIFIED for the
//     handles on its directory (child, content_generation). Creating a file
//     with content is not a modification;
//   - CHILD_ADDED, for the handles on a directory a node was created in
//     (child), once per node created (make-parents: each parent's own);
//   - CHILD_REMOVED, for the handles on a directory a node was deleted from
//     (child), after the deleted node's HANDLE_INVALID;
//   - HANDLE_INVALID, for the handles on a node being deleted (by Delete,
//     recursively children first, or as an ephemeral of an ended session);
//     nothing more is queued for them;
//   - LOCK_ACQUIRED, for the handles on a node whose lock goes from free to
//     held (lock_generation, the mode granted): once per holding period,
//     shared holders joining it add none;
//   - CONFLICTING_LOCK_REQUEST, for the holders of a lock (lock_generation
//     held, the mode asked), when an Acquire cannot be granted because of
//     them (it is incompatible with their mode): a queued Acquire, a
//     TryAcquire refused with LOCK_HELD (the one change a refused command
//     makes, besides saving a sequenced command's answer), and, for the handles a release grants the lock to, when
//     others still wait behind them.
//
// The writer's own handles are told like any other. An event is queued for
// a handle only if its session's principal may read the handle's node
// when the change is made (see "Access control"): what a principal may
// not read, it does not hear about. HANDLE_INVALID is queued whatever the
// rights, and EVENTS_LOST stands for events that were queued. Every event
// carries the handle, the handle's path and the clock. MASTER_FAILED_OVER is not
// queued here (the master adds it to its first reply to each session).
//
// A session keeps its events until its client acknowledges them:
// TrimEvents{session, acked} (the master batches many sessions in one
// command, at most MaxTrimAcks) drops the events numbered acked or lower
// (acked is clamped to the newest; ended sessions are skipped; a negative
// ack refuses the whole command). EventsAfter reads what follows an ack,
// bounded in count and bytes; HasEventsAfter says whether there is any.
//
// Bounds: a queue holds at most Limits.MaxEventsPerSession events, the cell
// Limits.MaxTotalEvents (a queue at the cell limit does not grow, except
// from empty). On overflow the oldest events are replaced by one
// EVENTS_LOST event at the front of the queue, which takes the number of
// the newest one it replaces and says from which number it stands for
// (lost_from); later overflows grow it. Numbers stay gapless, so a client
// that had already received some of the dropped events knows exactly what
// it lost, and one that had them all can ignore it. A session's queue ends
// with the session.
//
// # What clients cache
//
// Clients cache a file's contents with its Stat and a directory's listing
// (its children's Stats), by path, and the master invalidates their copies
// before a change commits. Reach says which a command may change,
// computed from the state before the command commits: with its time_ms,
// so the lock-delays its clock ends, whose queues it grants, are in it
// whatever the command names; a session's end reaches its locks and its
// ephemeral nodes and nothing else. Commands ahead of it in the log may
// apply in between; Reach states the two conditions under which it stays
// a superset all the same, which the master keeps. A Multi reaches what
// its ops would one by one, except that a DELETE names a path, not a
// node: the node there when it applies and its ancestors may be others,
// and the ephemeral ones may go with it, so it reaches every ancestor of
// its path — unless an INSTANCE compare of the Multi pins the node there
// now, which then has the same ancestors.
//
// # Limits
//
// Every collection is bounded (Limits, DefaultLimits): nodes, sessions,
// handles (per session and in all), waiters per lock, entries per directory,
// content per file and in all, saved answers per session, queued events
// (which fold into EVENTS_LOST rather than refuse anything). Exceeding one
// is LIMIT_EXCEEDED (TOO_LARGE for the per-file content limit) and changes
// nothing. A Multi's compares, ops and contents are bounded by the
// chubby.MAX_MULTI_* constants (see "Atomic multi-operation"); the cell
// bounds the contents lower still, to what one log entry holds beside the
// longest paths (maxMultiContentBytes in cell/entrylimit.go).
//
// A directory of Limits.MaxChildren entries is listed in pages:
// ReadDirPage returns the entries whose names sort after a cursor, at most
// limit of them and within maxBytes of encoding (always at least one when
// there is one: one entry is at most MaxDirEntryBytes), with More and the
// directory's content generation, which every child added or removed bumps,
// so a reader that sees the same generation on every page has one
// consistent set of names. The cell serves each ReadDir call as one page
// (at most chubby.MAX_READDIR_ENTRIES entries); ReadDir returns every entry
// at once, for tests and tools in the process.
//
// # Timestamp oracle
//
// The state keeps the oracle's high-water mark (TimestampsReserved, 0 at
// first). ReserveTimestamps{upto} raises it to upto, 1..MaxTimestamp
// (INVALID_ARGUMENT otherwise), and never lowers it; it belongs to no
// session. The master hands out timestamps only at or below a mark that
// has committed, and a new master starts above the mark (package
// cell/master, Oracle).
//
// # Snapshots
//
// Snapshot encodes the whole state as fsm.Snapshot (Thrift binary, version
// 3) in a fixed order: nodes depth-first with siblings by name, sessions and
// handles by id, a session's saved answers and queued events by seq, lock
// holders by handle id, waiters in queue order. Restore checks the
// encoding, every field, every cross-reference and every invariant of the
// state and returns an error for a corrupt snapshot. It also reads version
// 2 (from before events: no queues, event masks as stored). A node's ACL
// names are encoded only when one is set and a session's principal only
// when it is not Anonymous, so a cell without ACLs encodes to the bytes it
// did before them; Restore validates both and rebuilds what it derives
// from the ACL files.
//
// # Format versions
//
// A snapshot carries its version (SnapshotVersion) and a command may
// carry one (fsm.Command.version, unset: CommandVersion 1). Restore and
// DecodeCommand refuse a newer version than this release reads with a
// *FormatError naming both, so an older release never applies, or
// misreads, what a newer one wrote; CheckCommand lets a replica check its
// whole log before it starts.
package fs
