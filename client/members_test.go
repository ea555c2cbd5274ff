package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chubbygo/chubby/gen/chubby"
)

// The member list: the client follows the cell's configuration as
// GetMaster names it (see master's doc for the rule).

func TestAdoptMembers(t *testing.T) {
	long := strings.Repeat("h", maxAddrBytes) + ":1"
	for _, tc := range []struct {
		name     string
		seeds    []string
		from     string
		master   string
		replicas []string
		want     []string
		changed  bool
	}{
		{"FindsEveryMember", []string{"a:1"}, "a:1", "a:1", []string{"a:1", "b:1", "c:1"}, []string{"a:1", "b:1", "c:1"}, true},
		{"ConfigurationIsTheTruth", []string{"a:1", "x:1", "y:1"}, "a:1", "a:1", []string{"a:1", "b:1"}, []string{"a:1", "b:1"}, true},
		{"KeepsWhereTheAnswerCameFrom", []string{"seed:7"}, "seed:7", "b:1", []string{"b:1", "c:1"}, []string{"b:1", "c:1", "seed:7"}, true},
		{"KeepsTheNamedMaster", []string{"a:1"}, "a:1", "m:1", []string{"a:1", "b:1"}, []string{"a:1", "b:1", "m:1"}, true},
		{"DropsBadEntries", []string{"a:1"}, "a:1", "a:1",
			[]string{"", "no-port", "b:1", "b:1", "h:0", "h:99999", " :1", long, "c:1", "a b:1"}, []string{"b:1", "c:1", "a:1"}, true},
		{"NoConfigurationNamed", []string{"a:1", "b:1"}, "a:1", "a:1", nil, []string{"a:1", "b:1"}, false},
		{"OnlyGarbageNamed", []string{"a:1", "b:1"}, "a:1", "a:1", []string{"", "nope", long}, []string{"a:1", "b:1"}, false},
		{"Unchanged", []string{"a:1", "b:1"}, "a:1", "a:1", []string{"a:1", "b:1"}, []string{"a:1", "b:1"}, false},
		{"BadFromAndMasterNotKept", []string{"a:1"}, "", "nope", []string{"b:1"}, []string{"b:1"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newLocator(tc.seeds, nil, time.Second)
			if got := m.adopt(tc.from, tc.master, tc.replicas); got != tc.changed {
				t.Errorf("adopt reported changed=%v, want %v", got, tc.changed)
			}
			if got := m.replicas(); !slices.Equal(got, tc.want) {
				t.Errorf("replicas %q, want %q", got, tc.want)
			}
			if got := m.g.Seeds(); !slices.Equal(got, tc.seeds) {
				t.Errorf("seeds changed to %q", got)
			}
		})
	}
}

// TestAdoptIsBounded: however many addresses an answer names, at most
// MaxReplicas are kept, the replica that answered and the master among
// them, with few allocations (package locate's TestAdoptIsBounded checks
// that the list allocated is no bigger).
func TestAdoptIsBounded(t *testing.T) {
	huge := make([]string, 100_000)
	for i := range huge {
		huge[i] = fmt.Sprintf("r%d:%d", i, 1+i%65535)
	}
	m := newLocator([]string{"seed:1"}, nil, time.Second)
	m.adopt("seed:1", "master:1", huge)
	got := m.replicas()
	if len(got) != MaxReplicas {
		t.Fatalf("kept %d addresses, want %d", len(got), MaxReplicas)
	}
	if !slices.Contains(got, "seed:1") || !slices.Contains(got, "master:1") || got[0] != huge[0] {
		t.Errorf("kept %q: want the first named, the replica that answered and the master", got)
	}
	allocs := testing.AllocsPerRun(10, func() { m.adopt("seed:1", "master:1", huge) })
	if allocs > 5 {
		t.Errorf("adopt of a huge answer made %v allocations", allocs)
	}
}

// TestAdoptMovesTheRoundRobin: after the list changes, a replica that
// cannot be reached moves the guess to the next member of the new list.
func TestAdoptMovesTheRoundRobin(t *testing.T) {
	m := newLocator([]string{"a:1"}, nil, time.Second)
	m.adopt("a:1", "a:1", []string{"c:1", "a:1", "b:1"})
	m.unreachable("a:1")
	if got := m.addr(); got != "b:1" {
		t.Fatalf("after a:1 failed: guess %s, want b:1 (next after a:1)", got)
	}
	m.unreachable("b:1")
	if got := m.addr(); got != "c:1" {
		t.Fatalf("after b:1 failed: guess %s, want c:1", got)
	}
	// The guess is not a member: the list starts over.
	m.learned("z:1")
	m.adopt("z:1", "z:1", []string{"d:1", "e:1"})
	m.unreachable("z:1")
	if got := m.addr(); got != "d:1" {
		t.Fatalf("guess %s, want d:1", got)
	}
}

func TestMulti(t *testing.T) {
	m := newLocator([]string{"a:1"}, nil, time.Second)
	if m.multi() {
		t.Error("one seed, one member: multi")
	}
	m.adopt("a:1", "a:1", []string{"a:1", "b:1"})
	if !m.multi() {
		t.Error("two members: not multi")
	}
	m.adopt("a:1", "a:1", []string{"a:1"})
	if m.multi() {
		t.Error("back to one member: multi")
	}
	// A seed that is not the one member is a second address to ask.
	s := newLocator([]string{"seed:1"}, nil, time.Second)
	s.adopt("x:1", "x:1", []string{"x:1"})
	if !s.multi() {
		t.Error("member x:1 and seed seed:1: not multi")
	}
}

// fakeCell answers askMasterFunc from a table, counting who was asked.
type fakeCell struct {
	mu      sync.Mutex
	answers map[string]fakeAnswer // by address asked; missing: unreachable
	asked   map[string]int
}

type fakeAnswer struct {
	master   string
	epoch    int64
	replicas []string
	err      error
}

func newFakeCell() *fakeCell {
	return &fakeCell{answers: map[string]fakeAnswer{}, asked: map[string]int{}}
}

func (f *fakeCell) set(addr string, a fakeAnswer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answers[addr] = a
}

func (f *fakeCell) ask(_ context.Context, addr, _ string) (string, int64, []string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked[addr]++
	a, ok := f.answers[addr]
	if !ok {
		return "", 0, nil, errors.New("connection refused")
	}
	if a.err != nil {
		return "", 0, nil, a.err
	}
	return a.master, a.epoch, slices.Clone(a.replicas), nil
}

// takeAsked returns who was asked since the last call, sorted.
func (f *fakeCell) takeAsked() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for a, n := range f.asked {
		for range n {
			out = append(out, a)
		}
	}
	clear(f.asked)
	slices.Sort(out)
	return out
}

func round(t *testing.T, m *locator) {
	t.Helper()
	select {
	case <-m.locate():
	case <-time.After(5 * time.Second):
		t.Fatal("locate round did not end")
	}
}

// TestLocateRoundFollowsMembers: a client told of one replica asks every
// member the cell names from then on, replicas added too, and stops asking
// replicas removed.
func TestLocateRoundFollowsMembers(t *testing.T) {
	f := newFakeCell()
	abc := fakeAnswer{master: "a:1", epoch: 2, replicas: []string{"a:1", "b:1", "c:1"}}
	f.set("a:1", abc)
	f.set("b:1", abc)
	f.set("c:1", abc)
	m := newLocator([]string{"a:1"}, f.ask, time.Second)
	round(t, m)
	if got := f.takeAsked(); !slices.Equal(got, []string{"a:1"}) {
		t.Fatalf("first round asked %q", got)
	}
	if got := m.replicas(); !slices.Equal(got, abc.replicas) {
		t.Fatalf("replicas %q after the first round", got)
	}
	round(t, m)
	if got := f.takeAsked(); !slices.Equal(got, []string{"a:1", "b:1", "c:1"}) {
		t.Fatalf("second round asked %q, want every member", got)
	}
	// d:1 added, b:1 removed (b:1 itself still believes the old
	// configuration: only the best answer counts).
	acd := fakeAnswer{master: "a:1", epoch: 2, replicas: []string{"a:1", "c:1", "d:1"}}
	f.set("a:1", acd)
	f.set("c:1", acd)
	f.set("d:1", acd)
	round(t, m)
	f.takeAsked()
	round(t, m)
	if got := f.takeAsked(); !slices.Equal(got, []string{"a:1", "c:1", "d:1"}) {
		t.Fatalf("after the change: asked %q, want a:1 c:1 d:1", got)
	}
	if got := m.addr(); got != "a:1" {
		t.Errorf("guess %s", got)
	}
}

// TestBestAnswerNamesTheMembers: the members adopted are those of the
// answer with the highest epoch and, on a tie, of the master's own answer.
func TestBestAnswerNamesTheMembers(t *testing.T) {
	f := newFakeCell()
	f.set("a:1", fakeAnswer{master: "old:1", epoch: 1, replicas: []string{"old:1", "a:1"}}) // deposed
	f.set("b:1", fakeAnswer{master: "c:1", epoch: 3, replicas: []string{"b:1", "c:1", "gone:1"}})
	f.set("c:1", fakeAnswer{master: "c:1", epoch: 3, replicas: []string{"b:1", "c:1", "new:1"}}) // the master
	m := newLocator([]string{"a:1", "b:1", "c:1"}, f.ask, time.Second)
	round(t, m)
	if got := m.replicas(); !slices.Equal(got, []string{"b:1", "c:1", "new:1"}) {
		t.Errorf("replicas %q, want the master's own b:1 c:1 new:1", got)
	}
	if m.addr() != "c:1" {
		t.Errorf("guess %s", m.addr())
	}
}

// TestLocateFallsBackOnSeeds: when no known member names a master (none
// answers, or they all refuse, as replicas removed from the cell do), the
// round asks the configured addresses it has not asked; when a member
// names one, it does not. (Simulator seed 1277: a client whose members
// had all left the cell but one, which refused, asked only it for ever.)
func TestLocateFallsBackOnSeeds(t *testing.T) {
	f := newFakeCell()
	m := newLocator([]string{"s:1", "x:1"}, f.ask, time.Second)
	m.adopt("x:1", "x:1", []string{"x:1", "y:1"}) // s:1 is no member any more
	f.set("s:1", fakeAnswer{master: "s:1", epoch: 5, replicas: []string{"s:1", "t:1"}})
	round(t, m) // x:1 and y:1 unreachable
	if got := f.takeAsked(); !slices.Equal(got, []string{"s:1", "x:1", "y:1"}) {
		t.Fatalf("asked %q, want the members, then the seed not among them", got)
	}
	if got := m.replicas(); !slices.Equal(got, []string{"s:1", "t:1"}) || m.addr() != "s:1" {
		t.Fatalf("after the fallback: replicas %q, guess %s", got, m.addr())
	}

	// s:1 is down and t:1 refuses (a replica removed from the cell says
	// to ask a member): x:1, the other seed, is asked too, and names the
	// master.
	f.set("s:1", fakeAnswer{err: errors.New("down")})
	f.set("t:1", fakeAnswer{err: &chubby.ChubbyError{Code: chubby.ErrorCode_UNAVAILABLE}})
	f.set("x:1", fakeAnswer{master: "x:1", epoch: 6, replicas: []string{"x:1", "z:1"}})
	round(t, m)
	if got := f.takeAsked(); !slices.Equal(got, []string{"s:1", "t:1", "x:1"}) {
		t.Fatalf("asked %q, want the members, then the seed not among them", got)
	}
	if got := m.lastLocated(); got.addr != "x:1" || m.addr() != "x:1" {
		t.Errorf("located %+v, guess %s", got, m.addr())
	}

	// A member names the master: no fallback.
	round(t, m)
	if got := f.takeAsked(); !slices.Equal(got, []string{"x:1", "z:1"}) {
		t.Fatalf("asked %q, want the members only", got)
	}
}

// TestRefreshMembers: maybeRefresh asks the master guess once per
// interval (one at a time), and adopts the answer's members; refreshSoon
// makes the next one due at once; a closed master asks nothing.
func TestRefreshMembers(t *testing.T) {
	f := newFakeCell()
	f.set("a:1", fakeAnswer{master: "a:1", epoch: 1, replicas: []string{"a:1", "b:1"}})
	m := newLocator([]string{"a:1"}, f.ask, time.Second)
	m.refreshEvery = time.Hour
	for range 10 {
		m.maybeRefresh()
	}
	waitReplicas(t, m, []string{"a:1", "b:1"})
	if got := f.takeAsked(); !slices.Equal(got, []string{"a:1"}) {
		t.Fatalf("ten maybeRefresh asked %q, want a:1 once", got)
	}
	m.maybeRefresh()
	time.Sleep(20 * time.Millisecond)
	if got := f.takeAsked(); len(got) != 0 {
		t.Fatalf("refreshed again within the interval: asked %q", got)
	}
	f.set("a:1", fakeAnswer{master: "a:1", epoch: 1, replicas: []string{"a:1", "c:1"}})
	m.refreshSoon()
	m.maybeRefresh()
	waitReplicas(t, m, []string{"a:1", "c:1"})
	// A refresh that fails changes nothing.
	f.set("a:1", fakeAnswer{err: errors.New("down")})
	m.refreshSoon()
	m.maybeRefresh()
	waitRefreshed(t, m)
	if got := m.replicas(); !slices.Equal(got, []string{"a:1", "c:1"}) {
		t.Fatalf("after a failed refresh: %q", got)
	}
	f.takeAsked()
	m.close()
	m.refreshSoon()
	m.maybeRefresh()
	time.Sleep(20 * time.Millisecond)
	if got := f.takeAsked(); len(got) != 0 {
		t.Fatalf("closed master asked %q", got)
	}
}

func waitReplicas(t *testing.T, m *locator, want []string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !slices.Equal(m.replicas(), want); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("replicas %q, want %q", m.replicas(), want)
		}
	}
	waitRefreshed(t, m)
}

func waitRefreshed(t *testing.T, m *locator) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		m.mu.Lock()
		busy := m.refreshing
		m.mu.Unlock()
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("refresh did not end")
		}
	}
}
