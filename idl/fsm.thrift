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
}

struct Command {
    1: required i64 time_ms              // the master's clock (Unix ms) when it proposed the command
    2: optional chubby.SessionID session // with seq: exactly-once across retries
    3: optional i64 seq                  // client request sequence, >0, increasing per session
    4: required Op op
}

struct Result {
    1: optional chubby.ChubbyError err
    2: optional chubby.SessionID session
    3: optional chubby.Handle handle
    4: optional chubby.Stat stat
    5: optional chubby.Sequencer sequencer
    6: optional bool created
    7: optional bool waiting  // Acquire with wait: queued, not granted yet
}
