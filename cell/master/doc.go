// Package master is the master's bookkeeping as deterministic code:
//
//   - Leases, the session lease table with its parked KeepAlives (Call),
//     configured by LeaseConfig; its errors are ErrNotServing,
//     ErrTooManyParked and ErrLeaseLapsed;
//   - Cache, the table of which sessions cache which nodes: a read
//     registers (RegisterRead's ReadMark, then RegisterACL), and a command's
//     Scope becomes a Change (InvalidateScope) that may commit once every
//     cacher has acknowledged or its lease has ended;
//   - Writes, the table of the master's commands in flight (one Write
//     each): their stamps and what keeps a command's reach a superset of
//     what it changes;
//   - Pipeline, the road of every command the master proposes: an
//     EndSession drains, the command is stamped (Writes) and its reach
//     invalidated (Cache), and the caller hears a Verdict — propose, in
//     which view, or why not — then says when the command finished;
//   - Waiters, the parked blocking Acquire calls, one per handle: which
//     call a lock's grant answers, and which attempts of a request may
//     not queue it again;
//   - the calls, each one call's rules from its arrival to its answer,
//     as steps its driver carries out: AcquireCall (a blocking Acquire:
//     park, propose, wait, withdraw with Withdrawal's retries, answer),
//     KeepAliveCall (park, then extend the leases only under the master
//     lease held at that moment) and TimestampsCall (take from the
//     oracle's window under the master lease, or wait for it to change);
//   - Oracle, the timestamp oracle: a window of timestamps in memory,
//     reserved ahead of need through the log;
//   - Epoch and EpochParts, the master epoch of a view and its parts;
//   - ParseKeepAlive, how a KeepAlive request is taken in (its epoch, its
//     sessions and what their clients acknowledged), by the cell's handler
//     and the simulator alike.
//
// The tables and the calls are pure state machines in the manner of
// replica/vr: no goroutine, no timer, no clock of their own — time, where
// they need it, comes in as an argument (Time: nanoseconds on the master's
// monotonic clock, the one the replicated log's master lease is measured
// on) and what to do comes out as return values; none is safe for
// concurrent use. The cell wraps the tables with a mutex, timers and
// parked RPCs (cell/leases.go, cell/changes.go, cell/machine.go,
// cell/oracle.go) and carries the calls' steps out on the handler's
// goroutine (handler.acquire, Server.keepAlive, Server.timestamps); the
// simulator (cell/sim) drives the very same code on simulated clocks, so
// what it checks is what ships.
//
// # The lease rule
//
// The promise a lock service exists for: while a client's session is
// safe, its locks are its own and its cache is current. A client believes
// its session safe until its local lease runs out; another client can be
// granted its locks only after a master ended the session, which a master
// does once the session's lease is over at that master. So every lease a
// client believes in must end, in real time, before any master can end
// the session. Three clocks are involved — the client's, the master's,
// and the next master's — and none is trusted for its absolute value,
// only for its rate: over any real interval d each advances by between
// d·(1−ε) and d·(1+ε), ε = vr.MaxClockDrift (2%).
//
// Notation: L is the session lease (Config.Lease), D the master lease
// (vr.Config.LeaseDuration), real(x) the real time at which a clock read
// x.
//
//  1. The master extends a session only while it holds its master lease.
//     At time t on its clock it holds it when a quorum acknowledged a
//     lease round that started at s with t < s + D·(1−ε) (vr's
//     LeaseValid; the cell reads it as ReadsAllowedUntil). A replica that
//     acknowledged the round helps no new view before D·(1+ε) on its own
//     clock after receiving it, so no other replica can become master
//     before real(s) + D > real(t): every grant happens, in real time,
//     before the next master starts serving (T').
//
//  2. A grant at t sets the session's end at the master to E = t + L
//     (its clock); the master ends the session no earlier than E. In real
//     time, real(E) ≤ real(t) + L/(1−ε) < T' + L/(1−ε).
//
//  3. The reply tells the client lease_ms = (E − a)·(1−ε)/(1+ε), a being
//     when the request arrived (the master's clock), and the client counts
//     lease_ms on its own clock from when it sent the request (before a).
//     Its belief ends in real time by real(sent) + lease_ms/(1−ε) ≤
//     real(a) + (E−a)/(1+ε) ≤ real(E): before this master ends the
//     session.
//
//  4. A new master gives every session it recovers from the log a lease
//     of Lr = L·(1+ε)/(1−ε) counted from when it starts serving (T' or
//     later), so it ends none before T' + Lr/(1+ε) = T' + L/(1−ε) in real
//     time, which is after every E of (2). The same holds for every later
//     master against the grants of this one.
//
// With L = 12 s and ε = 2%: Lr = 12.49 s, and a client is told about 4%
// less than the master holds (0.9 s of a KeepAlive parked for 10 s plus a
// 12 s lease), which is why a KeepAlive is answered Margin (default L/4)
// before the lease would end. A reply that arrives after its lease is
// over renews nothing (the client checks). A parked KeepAlive whose
// answer time finds the master lease lapsed is not extended: the cell
// waits briefly for the lease to come back, then refuses it, and a
// primary that no quorum answers for a view-change timeout past its lease
// steps down (vr), so its clients go looking for the new master and, cut
// off from it, fall into jeopardy within one lease.
//
// Ending a session later than E is always safe, and a master whose
// process was starved ends late on purpose (Leases.Due): it does not end a
// session whose client has a KeepAlive parked (it answers it instead), and
// after a late look it waits up to the lateness (at most a lease past E)
// for KeepAlives that arrived while it was not running. The client was
// not at fault; the master's own stall would otherwise end every session
// at once.
//
// Clock jumps (a wall clock set back or forward) do not matter: every time
// here is monotonic. Lock-delay is measured on the times stamped into
// commands (fs's clock), a second line of defence (the first is that the
// session ended, which (1)–(4) order after every belief), and those times
// cannot be moved ahead by the wall clock either: Writes stamps the wall
// clock clamped to no more than an earlier command's time plus the
// monotonic time elapsed since it (a new master starts from the state's
// clock and the instant it applied the command that set it), and never
// below an earlier stamp. A wall clock set forward, on this master or on a
// new one, leaves command times running at the monotonic rate (behind the
// wall clock by the jump: Stat times show it); one set back holds them
// still until it catches up — lock-delays then last longer, never shorter.
//
// # The cache
//
// Cache is the table of which sessions cache which nodes. Before a change
// commits, every session caching a node it touches is sent an
// invalidation and the change waits until each has acknowledged it or its
// lease at this master has ended (by (3), the client stopped using its
// cache by then). A cached copy is served without a rights check, so a
// change that may narrow what an ACL name grants (a write or removal of
// its ACL file) counts as touching every cached node whose read right the
// name governs: the table indexes cached nodes by the read ACL name their
// reads saw (Cache.RegisterACL, with the cost it states). A new master knows no cachers: every recovered caching
// session must flush (invalidate_all) before any change commits, or its
// recovered lease ends.
//
// What a change touches is the state machine's to say (fs.State.Reach),
// computed before the command is in the log, while commands ahead of it
// may still apply. Writes is the table of the master's commands in flight
// that keeps the reach a superset of what the command changes all the
// same: stamps that never decrease in the order reaches are computed, the
// locks that expired session ends in flight may put into lock-delay added
// to every reach, and a session end computed only once its session has no
// command in flight.
package master
