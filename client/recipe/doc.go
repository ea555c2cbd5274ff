// Package recipe builds what ZooKeeper's Curator and Redis lock users come
// for on the cell's primitives: locks, elections, barriers, counters and
// service registries. Each type's documentation says what happens when a
// participant dies and when the master fails over.
//
// One pattern runs through them: state is a node, and a participant is
// its session. A participant that dies (kill -9, a crash, a cut network)
// stops renewing its session; one lease later the master ends it, its
// ephemeral nodes are deleted and its locks released, after the hold's
// lock-delay (chubby.DEFAULT_LOCK_DELAY_MS unless client.LockOptions says
// otherwise) so that its late requests cannot overtake the next holder's.
// Waits learn of changes from handle events (or, for locks, from the
// cell's own queue), never by polling a herd. In a master failover
// sessions, locks and nodes survive; calls in flight are retried by the
// client.
//
// # Locks
//
// Mutex (re-entrant per value, as Curator's InterProcessMutex) and RWMutex
// are the cell's own lock on one file: waiters queue FIFO in the cell,
// which wakes only the one it grants, and a holder's Sequencer lets the
// servers it talks to refuse it once it has lost the lock. RWMutex's queue
// is FIFO across modes: a waiting writer blocks later readers. Semaphore
// gives N permits as N slot locks behind a FIFO gate, so the cell itself
// bounds the holders. SeqLock is ZooKeeper's recipe on ephemeral
// sequential nodes, each waiter watching its predecessor; it is kept to be
// measured against the cell's queue (handoff_bench_test.go): it needs
// three times the calls per hand-off and has no lock-delay and no
// sequencer. In a failover holders keep their locks; waiters on the cell's
// queue send their requests again and may change order (a new master
// drops the requests left waiting at the old one), while SeqLock's queue
// of nodes keeps its order.
//
// # Coordination
//
// Election and LeaderLatch hold a file's exclusive lock and write the
// leader's address into it (chubbyfs election runs on Election). Barrier
// is a file's existence; DoubleBarrier is one ephemeral file per
// participant; Registry is one ephemeral file per instance in a directory
// per service, watched through child events. SequenceIDs takes ids from a
// directory's sequential names, CASCounter from a compare-and-set on a
// file's content: dense, faster for one client and slower under
// contention (CHUBBY_RECIPE_BENCH=1 measures both).
package recipe
