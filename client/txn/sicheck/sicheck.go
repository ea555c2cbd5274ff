// Package sicheck checks a recorded history of transactions for
// violations of snapshot isolation (SI) as Percolator-style transactions
// implement it, so that a bank test can tell exactly what went wrong.
//
// # Snapshot isolation
//
// Every transaction T takes a start timestamp S(T) from a strictly
// increasing oracle and, if it commits, a commit timestamp C(T) > S(T)
// from the same oracle. T reads the snapshot at S(T): for each key, the
// value written by the committed transaction with the largest C <= S(T)
// (no value if there is none, or if that transaction deleted the key).
// Two committed transactions that write one key must not overlap: one of
// them must commit before the other starts (first-committer-wins). Below,
// Tn is the transaction whose start timestamp is n.
//
// # What the history records
//
// Each value a transaction writes names the writer's start timestamp, so
// each [Read] tells which transaction's write it saw ([Read.Writer], 0 for
// no value). That is enough to check every read against the snapshot the
// reader was owed, whatever the reader's own outcome: Percolator reads
// are snapshot reads whether the reader later commits, aborts or is never
// heard of again.
//
// # The checks
//
// Of the history itself: starts are positive and unique
// ([DuplicateStart]); a committed transaction that wrote commits after it
// starts, at a timestamp no other committed transaction has ([BadCommit];
// a read-only transaction's Commit is ignored: Percolator commits it at
// its start, with nothing to order); every
// outcome is known ([Unresolved]: the test lost track of a transaction,
// which it must resolve before the history can be trusted).
//
// Of each read of T, of key k, seeing writer W: W is a transaction of the
// history ([UnknownWriter]) that wrote k ([NotAWriter]); W committed
// ([AbortedRead]: a dirty read of an aborted write) before T started
// ([FutureRead]: T saw a write its snapshot does not hold); and no other
// committed write of k lies between C(W) and S(T) ([StaleRead]: T saw an
// old version, or nothing, where its snapshot holds a newer one). A
// transaction that read one key twice saw one writer both times
// ([NonRepeatable]). When T saw some writes of a committed W but missed
// another write of W that its snapshot holds, W was half visible
// ([HalfVisible], reported besides the [StaleRead]): the atomicity failure
// a broken commit protocol causes, named directly.
//
// Of the writers: no two committed transactions that write (or delete) one
// key overlap, S1 < C2 and S2 < C1 ([LostUpdate]: first-committer-wins did
// not hold, and one update may have been lost).
//
// # Write skew is not an anomaly
//
// T1 reads x and y and writes x; T2 reads x and y and writes y; they
// overlap and both commit. No serial order explains the result, yet SI
// allows it: each read saw its snapshot and the write sets are disjoint,
// so first-committer-wins has nothing to stop. A checker of SI that
// reported it would fail correct Percolator implementations, so sicheck
// does not; a bank test that needs serializability must make such
// transactions write a common key.
//
// # Cost
//
// Check indexes the committed writes of each key by commit timestamp and
// answers "latest write of k with C <= t" by binary search, so it runs in
// O(reads × log(writers per key) + writers × log writers): a history of
// 100,000 transactions and 1,000,000 reads takes a fraction of a second
// (BenchmarkCheck).
package sicheck

import "fmt"

// Outcome is what became of a transaction. The zero value is Unknown, so a
// transaction whose outcome was never recorded is not mistaken for one
// that committed or aborted.
type Outcome int

const (
	// Unknown: not (yet) known; the checker reports it as Unresolved,
	// since neither its writes nor their absence can be judged.
	Unknown Outcome = iota
	// Committed: the transaction committed at [Txn.Commit].
	Committed
	// Aborted: the transaction rolled back; its writes must never be seen.
	Aborted
)

// String names the outcome ("unknown", "committed", "aborted"), so that
// anomalies and test failures read as words, not numbers.
func (o Outcome) String() string {
	switch o {
	case Unknown:
		return "unknown"
	case Committed:
		return "committed"
	case Aborted:
		return "aborted"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Read is one read of a transaction, in the order it was made. It records
// whose write the read saw, which is all the checker needs to compare it
// with the reader's snapshot.
type Read struct {
	Key string
	// Writer is the start timestamp of the transaction whose write was
	// read; 0: the key had no value (never written, or deleted).
	Writer int64
}

// Txn is one transaction of the history: its timestamps, its outcome, what
// it read and what it wrote. The order of the transactions in a history
// does not matter.
type Txn struct {
	// Start is the start timestamp: > 0, unique in the history. Of
	// transactions sharing a start only the first is checked further; a
	// transaction with Start <= 0 is not checked further.
	Start int64
	// Commit is the commit timestamp: > Start when Outcome == Committed
	// and the transaction wrote; ignored otherwise.
	Commit  int64
	Outcome Outcome
	// Reads are the transaction's reads, in the order it made them.
	Reads []Read
	// Writes are the keys it wrote (a key at most once; repeats are
	// ignored).
	Writes []string
	// Deletes are the keys it deleted: a delete writes "no value", so a
	// snapshot holding it reads the key with Writer == 0. A key in both
	// Writes and Deletes counts as written.
	Deletes []string
}

// Kind names a class of anomaly. Kinds are strings so that they sort and
// print as themselves.
type Kind string

// The kinds of anomaly Check reports; the package documentation explains
// each check and why it is one.
const (
	// DuplicateStart: two transactions with one start timestamp, or a
	// Start <= 0.
	DuplicateStart Kind = "duplicate-start"
	// BadCommit: a committed transaction that wrote with Commit <= Start,
	// or two such transactions with one commit timestamp.
	BadCommit Kind = "bad-commit"
	// Unresolved: a transaction whose Outcome is Unknown (or not a valid
	// Outcome).
	Unresolved Kind = "unresolved"
	// UnknownWriter: a read's Writer is not a transaction of the history.
	UnknownWriter Kind = "unknown-writer"
	// NotAWriter: a read's Writer is a transaction that did not write that
	// key (deleting it does not count: a delete leaves no value to read).
	NotAWriter Kind = "not-a-writer"
	// AbortedRead: a read saw the write of an aborted transaction.
	AbortedRead Kind = "aborted-read"
	// FutureRead: a read saw a write committed after the reader's start
	// (C(W) > S(R)): a dirty or non-snapshot read. A reader seeing its own
	// write of a key it wrote is allowed and not checked.
	FutureRead Kind = "future-read"
	// StaleRead: a read missed a newer committed write of the key with
	// C <= S(R); this includes reading "no value" when the latest such
	// write is not a delete.
	StaleRead Kind = "stale-read"
	// NonRepeatable: one transaction read one key twice and saw different
	// writers.
	NonRepeatable Kind = "non-repeatable"
	// LostUpdate: two committed transactions wrote one key with
	// overlapping [Start, Commit] intervals (S1 < C2 and S2 < C1).
	LostUpdate Kind = "lost-update"
	// HalfVisible: a reader saw some of a committed transaction's writes
	// but, for another key it also read, not that transaction's write,
	// though that write was the latest committed with C <= S(R). Reported
	// besides the StaleRead it implies, once per (reader, writer) pair, so
	// that a failing bank test names the atomicity failure directly.
	HalfVisible Kind = "half-visible"
)

// Anomaly is one violation found in a history: what kind, which
// transactions and key, and a sentence saying what happened.
type Anomaly struct {
	Kind Kind
	// Txn is the start timestamp of the transaction at fault: the reader,
	// or the later of two writers.
	Txn int64
	// Other is the other transaction involved, if any: the writer read
	// (for StaleRead and HalfVisible: the writer whose newer write was
	// missed), or the conflicting writer; 0 if none.
	Other int64
	// Key is the key involved, if any.
	Key string
	// Detail is one line a person can act on, naming timestamps.
	Detail string
}

// String renders the anomaly on one line: kind, transactions, key and
// detail, e.g. for a test's failure message.
func (a Anomaly) String() string {
	s := fmt.Sprintf("%s T%d", a.Kind, a.Txn)
	if a.Other != 0 {
		s += fmt.Sprintf(" other T%d", a.Other)
	}
	if a.Key != "" {
		s += fmt.Sprintf(" key %q", a.Key)
	}
	return s + ": " + a.Detail
}

// maxAnomalies bounds Check's output, so that a badly broken history of
// millions of reads yields a readable report in bounded memory.
const maxAnomalies = 1000

// Check returns every anomaly of h, sorted by (Txn, Kind, Key, Other) so
// that its output is deterministic; nil if there is none. At most
// maxAnomalies are returned: the first in that order. Each (Txn, Kind,
// Key, Other) is reported at most once. Check does not modify h.
func Check(h []Txn) []Anomaly {
	c := newChecker(h)
	c.checkOutcomes()
	c.checkConflicts()
	for _, t := range c.order {
		c.checkReads(t)
	}
	return c.out.result()
}
