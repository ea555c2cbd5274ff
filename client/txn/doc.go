// Package txn runs Percolator's cross-row snapshot-isolation transactions
// on the lock cell: rows stored in the cell's files, timestamps from the
// cell's oracle, worker liveness from the cell's ephemeral files.
//
// # Data model
//
// A table is a directory of the cell (see CellStore for its layout). A row
// is one file, holding every column of the row; a column holds
// Percolator's three columns for it:
//
//	lock   the transaction that has prewritten the column and not yet
//	       committed it: its start timestamp, its primary (row, column) and
//	       its worker
//	data   start timestamp → value, one per write not yet collected
//	write  commit timestamp → (start timestamp, put | delete | rollback):
//	       a pointer to the data, not the data
//
// One file per row, rather than a directory per row with a file per
// column, because a row write must be atomic: one compare-and-swap on one
// file (a Multi comparing the file's instance and content generation) is
// Bigtable's single-row transaction, and it costs one log entry however
// many columns change. The price is that a row (every column, every
// version kept) must fit the cell's 256 KiB per file: keep rows narrow and
// collect garbage.
//
// The storage is behind Store, a map from key to row with compare-and-swap
// and nothing else, so the protocol runs unchanged on any store with
// single-row atomicity; MemStore is a second implementation.
//
// # The protocol
//
// Begin takes a start timestamp S from the oracle. Get reads a column at
// S: the newest write record with commit timestamp ≤ S, and its data. A
// lock older than S means a transaction that may commit below S: the
// reader resolves it if its worker is dead and waits if not. Writes are
// buffered.
//
// Commit picks the first written (row, column) as the primary and
// prewrites every row at once: on each row, in one row write, it checks
// that no write record is newer than S (else ErrConflict: first committer
// wins) and no other lock is there (one whose primary committed is rolled
// forward, a dead worker's is resolved, a live one is a conflict), then
// writes a lock and the data per column. Then it takes a commit timestamp
// C and commits the primary: the primary's row write that replaces its
// locks by write records C → S is the commit point. Commit returns; the
// secondaries are committed the same way in the background (Close waits
// for them). Each row write starts from the row as this transaction last
// saw it, so a row nobody else touched costs no extra read.
//
// # Hot rows
//
// DB.Run begins a new transaction after an attempt that did not commit.
// When the attempt lost on rows others wrote (a conflict, a lock waited
// out, a contended row) and the store is a RowLocker — CellStore uses the
// cell's FIFO locks on files in dir/hot, MemStore queues in memory — the
// next attempt first locks those rows, in key order, and takes its start
// timestamp only then: the transactions that want a hot row queue for it
// instead of aborting one another, and each loses only to one that did
// not queue. The locks are advisory: safety rests on the protocol alone,
// and a transaction that never conflicts never takes one (see hot.go).
//
// # Workers, liveness and lock resolution
//
// Open registers the DB as a worker: an ephemeral file in the table's
// workers directory, owned by the session. The session ends (expiry or
// close) before the cell deletes the file, and an ended session can
// never write again, so once the file is gone the worker's locks can be
// decided by anyone, from the primary alone (see DB.resolve):
//
//   - the primary still locked, or neither locked nor decided (its
//     prewrite has not landed): never committed. The primary is rolled
//     back, leaving a rollback record that a late prewrite or commit of
//     it meets, and then the lock met.
//   - the primary has the commit record: committed. The lock met is rolled
//     forward to a write record at the same commit timestamp.
//   - otherwise: rolled back.
//
// A lock whose primary committed is rolled forward by anyone, the writer
// alive or not. The decision is taken inside the primary's row write, so
// a worker wrongly thought dead (its token deleted by hand) loses only its
// transaction: safety never rests on liveness, only progress does. A
// worker alive but slow is waited for (Config.LockWait), never overruled; a worker that never ends its transactions blocks readers of
// those columns until its session ends. A DB settles the locks of its own
// failed commits itself (nobody else may while it lives).
//
// # Garbage collection
//
// Every version stays until GC removes those below a safe point that no
// snapshot at or above it can see (GCLoop runs it with a safe point of a
// given age). A row GC removed versions from carries that safe point as
// its floor, and the table's meta row the highest one, for rows that are
// gone: a transaction that started below the floor of a row it reads or
// writes fails with ErrSnapshotTooOld. A read costs one call (two for a
// row that does not exist). See DB.GC for why the order of its steps makes
// it safe while transactions run.
//
// # Observers
//
// An Observer calls a function for every committed change of a watched
// column, from the rows directory's events (see Observer), at least once.
// Observer.WatchTxn is Percolator's observer with its acknowledgment
// column: the function runs in a transaction that also writes, in the
// row, the commit timestamp of the change it handled, so that however many
// observers watch the column under one name, one transaction commits per
// change.
//
// Garbage collection and a worker wrongly thought dead: its transaction,
// older than the safe point, was rolled back, and GC then removed the
// rollback record on its primary that refuses a late prewrite. The
// prewrite is refused anyway, by the floor GC leaves on the row (or the
// table's, when the row went): a transaction below it gets
// ErrSnapshotTooOld (TestLatePrimaryPrewriteAfterGC).
//
// # Limits
//
// Keys up to MaxKeyBytes, columns up to MaxColumnBytes, values up to
// MaxValueBytes, MaxWrites cells per transaction; a row within the cell's
// 256 KiB. A table is a directory, bounded by the cell's 100,000 children
// and 1 GiB of content in all: this is for the small, precious tables a
// lock service suits (configuration, metadata, allocations, queues of
// work), not a big-data store.
package txn
