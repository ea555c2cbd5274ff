// Package recipe builds what ZooKeeper's Curator and Redis lock users come
// for on the cell's primitives: locks, elections, barriers, counters and
// service registries. Each recipe documents what happens when a
// participant dies (its session ends: its ephemeral nodes go, its locks
// are released, subject to lock-delay) and when the master fails over
// (sessions, locks and ephemeral nodes survive; calls in flight are
// retried by the client).
package recipe
