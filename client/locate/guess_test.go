package locate

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func newGuess(seeds ...string) *Guess {
	return New(Config{Seeds: seeds, Valid: func(a string) bool { return strings.Contains(a, ":") }})
}

// TestGuessMoves is the table of where the guess goes.
func TestGuessMoves(t *testing.T) {
	for _, tc := range []struct {
		name     string
		do       func(g *Guess) bool
		want     string
		followed bool
	}{
		{"hint followed", func(g *Guess) bool { return g.Redirect("a:1", "c:1") }, "c:1", true},
		{"no hint: next member", func(g *Guess) bool { return g.Redirect("a:1", "") }, "b:1", false},
		{"hint naming itself", func(g *Guess) bool { return g.Redirect("a:1", "a:1") }, "b:1", false},
		{"malformed hint", func(g *Guess) bool { return g.Redirect("a:1", "nope") }, "b:1", false},
		{"someone moved on already", func(g *Guess) bool { return g.Redirect("b:1", "c:1") }, "a:1", true},
		{"hint naming the suspect", func(g *Guess) bool {
			g.Unreachable("a:1") // a:1 suspect, b:1 the guess
			return g.Redirect("b:1", "a:1")
		}, "c:1", false},
		{"unreachable: next", func(g *Guess) bool { g.Unreachable("a:1"); return false }, "b:1", false},
		{"unreachable elsewhere: stays", func(g *Guess) bool { g.Unreachable("c:1"); return false }, "a:1", false},
		{"learned", func(g *Guess) bool { g.Learned("c:1"); return false }, "c:1", false},
		{"learned garbage", func(g *Guess) bool { g.Learned("nope"); return false }, "a:1", false},
	} {
		g := newGuess("a:1", "b:1", "c:1")
		if followed := tc.do(g); followed != tc.followed || g.Addr() != tc.want {
			t.Errorf("%s: guess %s followed %v, want %s %v", tc.name, g.Addr(), followed, tc.want, tc.followed)
		}
	}
}

func TestHeardOnlyNewerEpochs(t *testing.T) {
	g := newGuess("a:1", "b:1", "c:1")
	if news, first := g.Heard("b:1", 3); !news || !first || g.Addr() != "b:1" {
		t.Fatalf("first epoch: news %v first %v guess %s", news, first, g.Addr())
	}
	if news, _ := g.Heard("c:1", 3); news || g.Addr() != "b:1" {
		t.Fatal("the same epoch counted as news")
	}
	if news, first := g.Heard("c:1", 4); !news || first || g.Addr() != "c:1" {
		t.Fatalf("newer epoch: news %v first %v", news, first)
	}
	g.Unreachable("c:1") // the member after c:1 wraps to a:1
	if g.Addr() != "a:1" {
		t.Fatalf("after c:1 failed: %s", g.Addr())
	}
}

// TestAdoptIsBounded: however many addresses an answer names, at most
// MaxMembers are kept, the replica that answered and the master among
// them, and the list allocated is no bigger.
func TestAdoptIsBounded(t *testing.T) {
	huge := make([]string, 100_000)
	for i := range huge {
		huge[i] = fmt.Sprintf("r%d:%d", i, 1+i%65535)
	}
	g := newGuess("seed:1")
	if !g.Adopt("seed:1", "master:1", huge) {
		t.Fatal("not adopted")
	}
	if len(g.addrs) != 16 || cap(g.addrs) > 16 {
		t.Fatalf("kept %d addresses (capacity %d), want 16", len(g.addrs), cap(g.addrs))
	}
	if !slices.Contains(g.addrs, "seed:1") || !slices.Contains(g.addrs, "master:1") || g.addrs[0] != huge[0] {
		t.Errorf("kept %q: want the first named, the replica that answered and the master", g.addrs)
	}
}

// TestRound: the highest epoch wins, on a tie the master's own answer;
// the seeds are asked only when no member answered; the suspect lasts
// one round.
func TestRound(t *testing.T) {
	g := newGuess("a:1", "b:1", "s:1")
	g.Adopt("a:1", "a:1", []string{"a:1", "b:1", "c:1"})
	g.Unreachable("a:1")
	suspect, members := g.RoundStart()
	if suspect != "a:1" || !slices.Equal(members, []string{"a:1", "b:1", "c:1"}) {
		t.Fatalf("round names %q, asks %q", suspect, members)
	}
	none := []Answer{{From: "a:1"}, {From: "b:1"}, {From: "c:1"}}
	if got := g.Fallback(members, none); !slices.Equal(got, []string{"s:1"}) {
		t.Fatalf("fallback %q, want the seed not asked", got)
	}
	refused := []Answer{{From: "a:1", Answered: true}, {From: "b:1", Answered: true}, {From: "c:1"}}
	if got := g.Fallback(members, refused); !slices.Equal(got, []string{"s:1"}) {
		t.Fatalf("fallback %q after refusals only, want the seed not asked", got)
	}
	answers := []Answer{
		{From: "a:1", Master: "a:1", Epoch: 2, Answered: true},
		{From: "b:1", Master: "c:1", Epoch: 3, Answered: true},
		{From: "c:1", Master: "c:1", Epoch: 3, Answered: true},
		{From: "x:1", Master: "nope", Epoch: 9, Answered: true},
	}
	if got := g.Fallback(members, answers); got != nil {
		t.Fatalf("fallback %q after answers", got)
	}
	best, ok := g.Best(answers)
	if !ok || best.From != "c:1" || best.Epoch != 3 {
		t.Fatalf("best %+v", best)
	}
	g.RoundOver(suspect, best.Master)
	if g.Addr() != "c:1" {
		t.Fatalf("guess %s", g.Addr())
	}
	if s, _ := g.RoundStart(); s != "" {
		t.Fatalf("the suspect %s outlived its round", s)
	}
}

func TestWatchTargetSkipsTheGuess(t *testing.T) {
	g := newGuess("a:1", "b:1", "c:1")
	g.StartWatchAt(0)
	var got []string
	for range 4 {
		target, cur, _ := g.WatchTarget()
		if cur != "a:1" {
			t.Fatalf("names %s unreachable", cur)
		}
		got = append(got, target)
	}
	if !slices.Equal(got, []string{"b:1", "c:1", "b:1", "c:1"}) {
		t.Fatalf("watch targets %q", got)
	}
	if target, _, _ := newGuess("a:1").WatchTarget(); target != "" {
		t.Fatalf("one replica: watch at %q", target)
	}
}
