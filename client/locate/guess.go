// Package locate is the client's master guess as pure code: which replica
// the client believes is the master, the cell's members it knows, and how
// both move on what the replicas say — a NOT_MASTER hint, a replica that
// cannot be reached, a locate round's answers, a master watch. It does no
// I/O and keeps no clock. The Go client (package client) keeps its guess
// in a Guess behind a mutex and asks the replicas over Kitex; the
// simulator (cell/sim) keeps one per simulated client and asks over its
// simulated network, so the guess the simulator checks is the one that
// ships.
//
// Where the guess moves:
//
//   - NOT_MASTER with a usable hint: to the hint (Redirect), unless the
//     hint names the master this client just failed to reach (the
//     suspect), which a replica that has not noticed its failure still
//     names: a locate round is the way on then.
//   - NOT_MASTER without one, or a replica that cannot be reached: to the
//     next known member, round-robin (Redirect, Unreachable); the latter
//     makes it the suspect, which the next locate round names to the
//     replicas so that they hold their answer until they know another.
//   - An authoritative answer (a GetMaster): there (Learned); one naming a
//     newer epoch than any heard (Heard) also tells the caller to resend
//     its calls in flight elsewhere, except for the first epoch heard.
//   - A locate round (RoundStart, Best, RoundOver): every known member is
//     asked; the named master with the highest epoch wins, on a tie the
//     master's own answer.
//
// The known members follow the cell's configuration (Adopt): a GetMaster
// answer naming the configuration's members replaces them, keeping the
// replica that answered and the master it names, dropping what is not a
// usable address, and keeping at most MaxMembers; the seeds are the
// fallback when no known member names a master in a round (Fallback): none
// answered, or all refused — as the members do when they have all left
// the cell, which goes on elsewhere.
package locate

import "slices"

// Config configures a Guess.
type Config struct {
	// Seeds are the configured replicas, in order. Required: not empty.
	Seeds []string
	// Valid reports whether an address is well-formed (the library:
	// host:port). Default: not empty.
	Valid func(addr string) bool
	// MaxMembers bounds the known members, so a hostile or broken replica
	// can make the client ask at most this many wrong addresses. Default 16.
	MaxMembers int
	// MaxAddrBytes drops longer member addresses. Default 512.
	MaxAddrBytes int
}

// Guess is a client's master guess and known members. The zero value is
// not usable: New makes one. It is not safe for concurrent use.
type Guess struct {
	cfg   Config
	addrs []string // the known members, in the order the cell named them; never empty
	cur   string   // the master guess
	next  int      // index in addrs of the address to try when cur fails
	// suspect is the guess that last could not be reached; the next
	// locate round names it (RoundStart), and clears it (RoundOver).
	suspect string
	epoch   int64 // the highest master epoch heard (Heard); 0: none yet
	// watchNext is the index in addrs of the next replica to park a
	// master watch at.
	watchNext int
}

// New returns the guess of a client configured with cfg.Seeds: the first
// seed. It panics on no seeds, which the caller validates.
func New(cfg Config) *Guess {
	if len(cfg.Seeds) == 0 {
		panic("locate: no seeds")
	}
	if cfg.Valid == nil {
		cfg.Valid = func(a string) bool { return a != "" }
	}
	if cfg.MaxMembers <= 0 {
		cfg.MaxMembers = 16
	}
	if cfg.MaxAddrBytes <= 0 {
		cfg.MaxAddrBytes = 512
	}
	cfg.Seeds = slices.Clone(cfg.Seeds)
	return &Guess{cfg: cfg, addrs: slices.Clone(cfg.Seeds), cur: cfg.Seeds[0], next: 1 % len(cfg.Seeds)}
}

// Addr returns the master guess: where the next call goes.
func (g *Guess) Addr() string { return g.cur }

// Members returns the known members (a copy).
func (g *Guess) Members() []string { return slices.Clone(g.addrs) }

// Seeds returns the configured replicas (a copy): they never change.
func (g *Guess) Seeds() []string { return slices.Clone(g.cfg.Seeds) }

// Epoch returns the highest master epoch heard (0: none yet).
func (g *Guess) Epoch() int64 { return g.epoch }

// Multi reports whether there is more than one address to ask where the
// master is: several known members, or a seed that is not the one.
func (g *Guess) Multi() bool {
	if len(g.addrs) > 1 {
		return true
	}
	return slices.ContainsFunc(g.cfg.Seeds, func(s string) bool { return s != g.addrs[0] })
}

// member reports whether an address from an answer may be kept.
func (g *Guess) member(a string) bool {
	return a != "" && len(a) <= g.cfg.MaxAddrBytes && g.cfg.Valid(a)
}

// Adopt brings the known members up to date from a GetMaster answer that
// the replica at from gave, naming master and the configuration's members
// (see the package documentation). It reports whether the list changed.
func (g *Guess) Adopt(from, master string, members []string) (changed bool) {
	max := g.cfg.MaxMembers
	list := make([]string, 0, min(len(members), max))
	for _, a := range members {
		if len(list) == max {
			break
		}
		if g.member(a) && !slices.Contains(list, a) {
			list = append(list, a)
		}
	}
	if len(list) == 0 {
		return false // no configuration named: keep what is known
	}
	var keep []string
	for _, a := range []string{from, master} {
		if g.member(a) && !slices.Contains(list, a) && !slices.Contains(keep, a) {
			keep = append(keep, a)
		}
	}
	if n := max - len(keep); len(list) > n {
		list = list[:n]
	}
	list = append(list, keep...)
	if slices.Equal(list, g.addrs) {
		return false
	}
	g.addrs = list
	g.next = 0
	if i := slices.Index(list, g.cur); i >= 0 {
		g.next = (i + 1) % len(list)
	}
	return true
}

// Redirect records that the replica at from is not the master. A usable
// hint (another, well-formed address) that is not the suspect becomes the
// guess, and Redirect reports true: follow it. Otherwise the next known
// member does, and a locate round is the way on.
func (g *Guess) Redirect(from, hint string) (followed bool) {
	followed = hint != "" && hint != from && g.cfg.Valid(hint) && hint != g.suspect
	if g.cur != from {
		return followed // someone else already moved on
	}
	if followed {
		g.cur = hint
		return true
	}
	g.advance()
	return false
}

// Unreachable records that the replica at from could not be reached: if
// it is the guess, it becomes the suspect and the next member the guess.
func (g *Guess) Unreachable(from string) {
	if g.cur == from {
		g.suspect = from
		g.advance()
	}
}

// Learned makes a well-formed address from an authoritative answer the guess.
func (g *Guess) Learned(addr string) {
	if addr != "" && g.cfg.Valid(addr) {
		g.cur = addr
	}
}

// Heard records that the replica at addr is master in epoch (a session's
// reply, a locate round's best answer, a master watch). news: the epoch
// is newer than any heard, and addr is the guess now. first: it is the
// first epoch heard, before which nothing is known to be stale; otherwise
// calls in flight at another replica should be sent again to addr.
func (g *Guess) Heard(addr string, epoch int64) (news, first bool) {
	if addr == "" || !g.cfg.Valid(addr) || epoch <= g.epoch {
		return false, false
	}
	first = g.epoch == 0
	g.epoch, g.cur = epoch, addr
	if i := slices.Index(g.addrs, addr); i >= 0 {
		g.next = (i + 1) % len(g.addrs)
	}
	return true, first
}

func (g *Guess) advance() {
	g.next %= len(g.addrs)
	g.cur = g.addrs[g.next]
	g.next = (g.next + 1) % len(g.addrs)
}

// Answer is one replica's answer in a locate round.
type Answer struct {
	From     string   // the replica asked
	Master   string   // the master it named ("" if none, or it failed)
	Epoch    int64    // the master's epoch, as it said
	Members  []string // the configuration's members it named
	Answered bool     // it answered, if only to refuse (a transport failure did not)
}

// better reports whether a is a better answer than b (which may be the
// zero answer): it names a master, b does not or names an older epoch; on
// a tie, a is the master's own answer (its configuration is the newest).
func (a Answer) better(b Answer) bool {
	switch {
	case b.Master == "":
		return true
	case a.Epoch != b.Epoch:
		return a.Epoch > b.Epoch
	}
	return a.From == a.Master && b.From != b.Master
}

// RoundStart returns what a locate round asks: the suspect to name to
// every replica (they hold their answer while they know no other
// master), and the members to ask.
func (g *Guess) RoundStart() (suspect string, members []string) {
	return g.suspect, slices.Clone(g.addrs)
}

// Fallback returns the seeds a round asks next when no member it asked
// named a master: those not asked yet (none when one did). A refusal is
// not enough to stop there: replicas removed from the cell refuse (they
// know no master of its configuration), and a client that knows only
// them would otherwise ask them for ever (simulator seed 1277).
func (g *Guess) Fallback(asked []string, answers []Answer) []string {
	if _, named := g.Best(answers); named {
		return nil
	}
	var seeds []string
	for _, s := range g.cfg.Seeds {
		if !slices.Contains(asked, s) {
			seeds = append(seeds, s)
		}
	}
	return seeds
}

// Best returns the best answer of a round that names a well-formed
// master; ok is false when none does.
func (g *Guess) Best(answers []Answer) (best Answer, ok bool) {
	for _, a := range answers {
		if a.Master != "" && g.cfg.Valid(a.Master) && a.better(best) {
			best = a
		}
	}
	return best, best.Master != ""
}

// RoundOver ends a round that named suspect: master, if any, is the guess
// (after the caller's Adopt and Heard of the best answer), and the suspect
// is cleared unless another came meanwhile. One round carries a suspect:
// if the replicas still name it after their hold, it is alive.
func (g *Guess) RoundOver(suspect, master string) {
	if master != "" {
		g.cur = master
	}
	if g.suspect == suspect {
		g.suspect = ""
	}
}

// WatchTarget picks the replica to park the next master watch at: a known
// member other than the guess, in turn ("" when there is none), with the
// guess to name as unreachable and the epoch known.
func (g *Guess) WatchTarget() (target, cur string, epoch int64) {
	for range len(g.addrs) {
		a := g.addrs[g.watchNext%len(g.addrs)]
		g.watchNext = (g.watchNext + 1) % len(g.addrs)
		if a != g.cur {
			return a, g.cur, g.epoch
		}
	}
	return "", g.cur, g.epoch
}

// StartWatchAt makes the watch start at the i-th known member (clients
// start at different replicas, so that their watches spread).
func (g *Guess) StartWatchAt(i int) { g.watchNext = i % len(g.addrs) }
