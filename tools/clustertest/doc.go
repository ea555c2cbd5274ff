// Package clustertest holds the tests that run a whole cell as real
// chubbyd processes and break it:
//
//   - TestFiveReplicasKill9 (cluster_test.go): five processes on loopback,
//     kill -9 of the master while clients work, checked by porcupine for
//     linearizability and for exclusive locks never held twice.
//   - TestNetns (netns_test.go): five processes, each in a network
//     namespace of its own, and client agents (the Go client library, in
//     namespaces of their own) — a partition that leaves the master with a
//     minority, a master paused longer than a lease, a master whose disk
//     fails, and kill -9 as a control — checked for what users of a lock
//     service rely on: a cut-off lock holder leaves SAFE within a lease, no
//     two holders at once, no stale cached read, nothing acknowledged lost,
//     linearizable. It needs root and iproute2 (it skips otherwise);
//     CHUBBY_NETNS_TRIALS=N runs N trials of each scenario and logs medians.
//   - TestNetnsReconfig (netns_reconfig_test.go): a cell that finds itself
//     by gossip (--join, --bootstrap-expect) changing its membership under
//     writes and lock cycles of agents given one replica address: it grows
//     from one replica, replaces a voter killed for good, goes through a
//     removal and a promotion with a voter cut off, and removes its master;
//     the checks of TestNetns on the whole history, and the longest stall a
//     client sees at each change. A short form by default;
//     CHUBBY_NETNS_RECONFIG=full runs every step. Root and iproute2, as
//     TestNetns.
//   - TestFailoverTimeline (failover_test.go), on demand
//     (CHUBBY_FAILOVER_TRIALS=n): kill -9 → next lock cycle of the Go
//     client, with where the time went in each trial.
package clustertest
