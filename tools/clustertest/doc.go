// Package clustertest holds the tests that run a whole cell as real
// chubbyd processes on loopback and break it: kill -9 of the master while
// clients work, checked by porcupine for linearizability and for exclusive
// locks never held twice; and, on demand (CHUBBY_FAILOVER_TRIALS=n),
// TestFailoverTimeline, which measures kill -9 → next lock cycle of the Go
// client and prints where the time went in each trial.
package clustertest
