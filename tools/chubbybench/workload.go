package main

import (
	"fmt"
	"slices"
	"strings"
)

// Kinds of workload.
const (
	kindLockDistinct   = "lock-distinct"   // every client cycles its own lock
	kindLockContended  = "lock-contended"  // every client cycles the same lock
	kindWrite          = "write"           // replace a 64-byte file/key/znode
	kindRead           = "read"            // read it back, from the server (uncached)
	kindReadCached     = "read-cached"     // read through a client cache / local read
	kindSessionCreate  = "session-create"  // create a session (timed), close it (untimed)
	kindSessionsHeld   = "sessions-held"   // hold N sessions alive: master CPU and RSS
	kindFailover       = "failover"        // kill -9 the leader: time to the next lock cycle
	kindTransferSpread = "transfer-spread" // 2-row transactions over many accounts
	kindTransferHot    = "transfer-hot"    // 2-row transactions over a few accounts

	// The availability run (chubbybench avail).
	kindIdle          = "idle"           // the cluster with nothing connected: CPU, view changes
	kindLockLoad      = "lock-load"      // N clients on distinct locks for the long window: cycles/s, view changes
	kindFailoverPause = "failover-pause" // SIGSTOP the leader: time to the next lock cycle, then SIGCONT
)

// Accounts of the transfer workloads: many, so that two transactions
// rarely meet, or few, so that they often do.
const (
	spreadAccounts = 1000
	hotAccounts    = 8
	// initialBalance is every account's balance after the set-up.
	initialBalance = 1_000_000
)

// Variants of sessions-held.
const (
	// variantBatched: many sessions' KeepAlives share a bounded number of
	// connections (our cell: up to 10,000 sessions per KeepAlive call;
	// etcd: every lease's keep-alive on one client connection).
	variantBatched = "batched"
	// variantDirect: one connection per session (our Go client today;
	// ZooKeeper, whose session is its connection).
	variantDirect = "direct"
)

// Workload is one measurement, run against every system.
type Workload struct {
	Kind    string
	Clients int    // closed-loop clients (lock, read, write, session-create, transfer)
	Variant string // sessions-held only
	// FullOnly workloads are skipped by --quick.
	FullOnly bool
	// Avail marks a workload of chubbybench avail; Hog is how many
	// busy-loop processes run beside the cluster meanwhile.
	Avail bool
	Hog   int
}

// Name is the workload's name in tables and --workloads: "lock-distinct/64",
// "sessions-held/batched", "failover".
// An availability workload's name ends in its hog setting:
// "idle/hog0", "lock-load/64/hog4", "failover/hog0", "failover-pause/hog4".
func (w Workload) Name() string {
	var n string
	switch {
	case w.Variant != "":
		n = w.Kind + "/" + w.Variant
	case w.isFailover() || w.Kind == kindIdle:
		n = w.Kind
	default:
		n = fmt.Sprintf("%s/%d", w.Kind, w.Clients)
	}
	if w.Avail {
		n += fmt.Sprintf("/hog%d", w.Hog)
	}
	return n
}

// isFailover reports whether w takes the leader out (kill -9 or SIGSTOP).
func (w Workload) isFailover() bool { return w.Kind == kindFailover || w.Kind == kindFailoverPause }

// boundAs is the workload whose bound (System.Bound) and applicability
// (System.NA) w shares: a lock-load is lock-distinct cycles, a paused
// leader is failed over like a killed one.
func (w Workload) boundAs() Workload {
	switch w.Kind {
	case kindLockLoad:
		return Workload{Kind: kindLockDistinct, Clients: w.Clients}
	case kindFailoverPause:
		return Workload{Kind: kindFailover, Clients: 1}
	}
	return w
}

// Describe says in words what the workload measures, for the report.
func (w Workload) Describe() string {
	switch w.Kind {
	case kindLockDistinct:
		return "N clients, each acquiring and releasing its own exclusive lock"
	case kindLockContended:
		return "N clients acquiring and releasing one exclusive lock"
	case kindWrite:
		return "N clients, each replacing its own 64-byte file (key, znode)"
	case kindRead:
		return "N clients, each reading its own 64-byte file from the server"
	case kindReadCached:
		return "the same read through the client cache (etcd: serializable read)"
	case kindSessionCreate:
		return "N clients creating sessions (latency: the creation; each is then closed, untimed)"
	case kindSessionsHeld:
		if w.Variant == variantBatched {
			return "sessions kept alive with many sessions per connection"
		}
		return "sessions kept alive with one connection per session"
	case kindFailover:
		return "kill -9 of the leader: time to the next successful lock cycle"
	case kindIdle:
		return "the cluster with no client connected: CPU of every server process, and (ours) view changes"
	case kindLockLoad:
		return "N clients, each acquiring and releasing its own exclusive lock, for the whole window: cycles/s, view changes"
	case kindFailoverPause:
		return "SIGSTOP of the leader (a silent, not a dead, master): time to the next successful lock cycle; then SIGCONT"
	case kindTransferSpread:
		return fmt.Sprintf("N clients, each running transactions that read two of %s accounts and move 1 from one to the other (optimistic; an aborted attempt is retried)", groupThousands(spreadAccounts))
	case kindTransferHot:
		return fmt.Sprintf("the same transfers among %d accounts (contended)", hotAccounts)
	}
	return w.Kind
}

// isTxn reports whether w is a transfer workload (transactions: its
// figures carry an abort rate).
func (w Workload) isTxn() bool { return w.Kind == kindTransferSpread || w.Kind == kindTransferHot }

// accounts is how many accounts a transfer workload moves money among.
func (w Workload) accounts() int {
	if w.Kind == kindTransferHot {
		return hotAccounts
	}
	return spreadAccounts
}

// isLoad reports whether w is a closed-loop throughput workload.
func (w Workload) isLoad() bool {
	switch w.Kind {
	case kindLockDistinct, kindLockContended, kindWrite, kindRead, kindReadCached, kindSessionCreate,
		kindTransferSpread, kindTransferHot:
		return true
	}
	return false
}

// workloads returns every workload of a run, in the order they run on
// each system.
func workloads(clients []int) []Workload {
	var out []Workload
	for _, c := range clients {
		out = append(out, Workload{Kind: kindLockDistinct, Clients: c})
	}
	for _, c := range clients {
		// One client on "one contended lock" is the distinct-lock cycle
		// again: only the full run measures it.
		out = append(out, Workload{Kind: kindLockContended, Clients: c, FullOnly: c == 1})
	}
	rw := []int{1, slices.Max(clients)}
	if rw[1] == 1 {
		rw = rw[:1]
	}
	for _, c := range rw {
		out = append(out, Workload{Kind: kindWrite, Clients: c})
	}
	for _, c := range rw {
		out = append(out, Workload{Kind: kindRead, Clients: c})
	}
	for _, c := range rw {
		out = append(out, Workload{Kind: kindReadCached, Clients: c})
	}
	// Transfers: --quick runs each at one client count (16 by default).
	// One client alone contends with nobody: no transfer-hot/1.
	q := quickClients(clients)
	for _, c := range clients {
		out = append(out, Workload{Kind: kindTransferSpread, Clients: c, FullOnly: c != q})
	}
	hot := slices.DeleteFunc(slices.Clone(clients), func(c int) bool { return c == 1 })
	if len(hot) > 0 {
		q := quickClients(hot)
		for _, c := range hot {
			out = append(out, Workload{Kind: kindTransferHot, Clients: c, FullOnly: c != q})
		}
	}
	out = append(out,
		Workload{Kind: kindSessionCreate, Clients: min(16, slices.Max(clients))},
		Workload{Kind: kindFailover, Clients: 1},
		Workload{Kind: kindSessionsHeld, Variant: variantBatched},
		Workload{Kind: kindSessionsHeld, Variant: variantDirect},
	)
	return out
}

// availWorkloads returns the workloads of chubbybench avail, for each hog
// setting in turn: idle first (before any client connects), then the lock
// load, then the failovers (they take nodes out).
func availWorkloads(hogs []int, loadClients int) []Workload {
	var out []Workload
	for _, h := range hogs {
		out = append(out,
			Workload{Kind: kindIdle, Avail: true, Hog: h},
			Workload{Kind: kindLockLoad, Clients: loadClients, Avail: true, Hog: h},
			Workload{Kind: kindFailover, Clients: 1, Avail: true, Hog: h},
			Workload{Kind: kindFailoverPause, Clients: 1, Avail: true, Hog: h},
		)
	}
	return out
}

// quickClients is the one client count of cs at which --quick runs a
// transfer workload: 16, else the most below 16, else the fewest.
func quickClients(cs []int) int {
	best := 0
	for _, c := range cs {
		if c <= 16 && c > best {
			best = c
		}
	}
	if best == 0 {
		best = slices.Min(cs)
	}
	return best
}

// selectWorkloads keeps the workloads of the run: by --quick and by the
// --workloads name prefixes (none: all).
func selectWorkloads(all []Workload, quick bool, prefixes []string) []Workload {
	var out []Workload
	for _, w := range all {
		if quick && w.FullOnly {
			continue
		}
		if len(prefixes) > 0 && !slices.ContainsFunc(prefixes, func(p string) bool {
			return strings.HasPrefix(w.Name(), strings.TrimSpace(p))
		}) {
			continue
		}
		out = append(out, w)
	}
	return out
}
