package discovery

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func metaOf(cell string, id uint64, dataID string) Meta {
	return Meta{Cell: cell, ID: id, ClientAddr: "127.0.0.1:7000", PeerAddr: "127.0.0.1:7100", DataID: dataID}
}

// mlNode is the memberlist Node of a replica with meta m at 127.0.0.1:port.
func mlNode(t *testing.T, m Meta, leaving bool, port uint16) *memberlist.Node {
	return &memberlist.Node{Name: nodeName(m), Addr: net.IPv4(127, 0, 0, 1), Port: port, Meta: mustEncode(t, m, leaving)}
}

// fakeClock is a settable clock.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func newTestTable(clock *fakeClock, suspectFor time.Duration) *table {
	tb := newTable(nodeName(metaOf("c", 1, "self")), "c", time.Minute,
		func(int) time.Duration { return suspectFor }, discard)
	tb.now = clock.now
	return tb
}

// state returns the state of the member called name, 0 if not listed.
func state(tb *table, name string) State {
	p, _ := tb.peer(name)
	return p.State
}

// expectChange checks whether the table's change channel ch was closed.
func expectChange(t *testing.T, ch <-chan struct{}, want bool, what string) {
	t.Helper()
	select {
	case <-ch:
		if !want {
			t.Fatalf("%s: Changed closed", what)
		}
	default:
		if want {
			t.Fatalf("%s: Changed not closed", what)
		}
	}
}

func TestTableStates(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	tb := newTestTable(clock, time.Hour)
	m := metaOf("c", 2, "two")
	name := nodeName(m)

	step := func(what string, f func(), want State, changed bool) {
		t.Helper()
		clock.t = clock.t.Add(time.Second)
		ch := tb.changedCh()
		f()
		expectChange(t, ch, changed, what)
		p, _ := tb.peer(name)
		if p.State != want {
			t.Fatalf("%s: state %v; want %v", what, p.State, want)
		}
		if changed && !p.Since.Equal(clock.t) && p.State != Alive {
			t.Fatalf("%s: since %v; want %v", what, p.Since, clock.t)
		}
	}
	step("join", func() { tb.alive(mlNode(t, m, false, 1)) }, Alive, true)
	step("same alive again", func() { tb.alive(mlNode(t, m, false, 1)) }, Alive, false)
	step("suspect", func() { tb.suspect(name) }, Suspect, true)
	step("suspect again", func() { tb.suspect(name) }, Suspect, false)
	step("acked", func() { tb.acked(name) }, Alive, true)
	step("acked when alive", func() { tb.acked(name) }, Alive, false)
	step("suspect", func() { tb.suspect(name) }, Suspect, true)
	step("dead", func() { tb.gone(mlNode(t, m, false, 1)) }, Dead, true)
	step("suspect when dead", func() { tb.suspect(name) }, Dead, false)
	step("back", func() { tb.alive(mlNode(t, m, false, 1)) }, Alive, true)
	m.Spare = true
	step("meta update", func() { tb.alive(mlNode(t, m, false, 1)) }, Alive, true)
	step("moved", func() { tb.alive(mlNode(t, m, false, 2)) }, Alive, true)
	step("leaving", func() { tb.alive(mlNode(t, m, true, 2)) }, Alive, false) // not in Peer
	step("left", func() { tb.gone(mlNode(t, m, true, 2)) }, Left, true)
	step("unknown suspect", func() { tb.suspect("9-nobody") }, Left, false)

	p, _ := tb.peer(name)
	if p.Meta != m || p.Addr != "127.0.0.1:2" {
		t.Fatalf("peer %+v; want meta %+v at 127.0.0.1:2", p, m)
	}
}

func TestTableLeftWithoutLeavingMetaIsDead(t *testing.T) {
	tb := newTestTable(&fakeClock{t: time.Unix(1000, 0)}, time.Hour)
	m := metaOf("c", 2, "two")
	tb.alive(mlNode(t, m, false, 1))
	tb.gone(mlNode(t, m, true, 1)) // the leaving meta came with the death
	if s := state(tb, nodeName(m)); s != Left {
		t.Fatalf("state %v; want left", s)
	}
}

func TestTableSuspicionRunsOut(t *testing.T) {
	tb := newTestTable(&fakeClock{t: time.Unix(1000, 0)}, 20*time.Millisecond)
	defer tb.stop()
	m := metaOf("c", 2, "two")
	tb.alive(mlNode(t, m, false, 1))
	ch := tb.changedCh()
	tb.suspect(nodeName(m))
	<-ch // suspect
	ch = tb.changedCh()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("suspicion did not run out")
	}
	if s := state(tb, nodeName(m)); s != Alive {
		t.Fatalf("after the suspicion ran out: %v; want alive", s)
	}
}

func TestTableRetention(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	tb := newTestTable(clock, time.Hour)
	self, other, alive := metaOf("c", 1, "self"), metaOf("c", 2, "two"), metaOf("c", 3, "three")
	for _, m := range []Meta{self, other, alive} {
		tb.alive(mlNode(t, m, false, 1))
	}
	tb.gone(mlNode(t, other, false, 1))
	tb.gone(mlNode(t, self, true, 1))
	if n := len(tb.peers()); n != 3 {
		t.Fatalf("%d peers; want 3", n)
	}
	clock.t = clock.t.Add(time.Minute) // exactly the retention: kept
	if n := len(tb.peers()); n != 3 {
		t.Fatalf("%d peers at the retention; want 3", n)
	}
	clock.t = clock.t.Add(time.Second)
	ps := tb.peers()
	if len(ps) != 2 || ps[0].Meta != self || ps[1].Meta != alive {
		t.Fatalf("after the retention: %+v; want self (left) and the live one", ps)
	}
}

func TestTableIgnoresStrangers(t *testing.T) {
	tb := newTestTable(&fakeClock{t: time.Unix(1000, 0)}, time.Hour)
	ch := tb.changedCh()
	tb.alive(mlNode(t, metaOf("other", 2, "two"), false, 1))
	tb.alive(&memberlist.Node{Name: "x", Addr: net.IPv4(127, 0, 0, 1), Port: 1, Meta: []byte("junk")})
	expectChange(t, ch, false, "strangers")
	if ps := tb.peers(); len(ps) != 0 {
		t.Fatalf("strangers listed: %+v", ps)
	}
}

func TestDelegateAdmit(t *testing.T) {
	d := &delegate{cell: "c", log: discard}
	good := mlNode(t, metaOf("c", 2, "two"), false, 1)
	other := mlNode(t, metaOf("other", 2, "two"), false, 1)
	junk := &memberlist.Node{Name: "2-two", Addr: net.IPv4(127, 0, 0, 1), Port: 1, Meta: []byte{1, 2, 3}}
	renamed := mlNode(t, metaOf("c", 2, "two"), false, 1)
	renamed.Name = "3-two"

	if err := d.NotifyAlive(good); err != nil {
		t.Fatalf("NotifyAlive(good): %v", err)
	}
	if err := d.NotifyMerge([]*memberlist.Node{good, good}); err != nil {
		t.Fatalf("NotifyMerge(good): %v", err)
	}
	for _, tc := range []struct {
		n    *memberlist.Node
		want string
	}{{other, `cell "other"`}, {junk, "bad meta"}, {renamed, "meta of"}} {
		if err := d.NotifyAlive(tc.n); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NotifyAlive(%s): %v; want an error with %q", tc.n.Name, err, tc.want)
		}
		if err := d.NotifyMerge([]*memberlist.Node{good, tc.n}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NotifyMerge(good, %s): %v; want an error with %q", tc.n.Name, err, tc.want)
		}
	}
	var me *MetaError
	if err := d.NotifyAlive(junk); !errors.As(err, &me) {
		t.Errorf("NotifyAlive(junk): %v; want a *MetaError", err)
	}
}

func TestDelegateFeedsTable(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	tb := newTestTable(clock, time.Hour)
	d := &delegate{cell: "c", log: discard, table: tb}
	self := mustEncode(t, metaOf("c", 1, "self"), false)
	d.meta.Store(&self)
	if got := d.NodeMeta(memberlist.MetaMaxSize); !bytes.Equal(got, self) {
		t.Fatalf("NodeMeta = %x; want %x", got, self)
	}

	m := metaOf("c", 2, "two")
	n := mlNode(t, m, false, 1)
	d.NotifyJoin(n)
	if s := state(tb, n.Name); s != Alive {
		t.Fatalf("after NotifyJoin: %v", s)
	}
	tb.suspect(n.Name)
	d.NotifyPingComplete(n, time.Millisecond, nil)
	if s := state(tb, n.Name); s != Alive {
		t.Fatalf("after an acknowledged probe of a suspect: %v; want alive", s)
	}
	m.Spare = true
	d.NotifyUpdate(mlNode(t, m, false, 1))
	if p, _ := tb.peer(n.Name); !p.Meta.Spare {
		t.Fatalf("after NotifyUpdate: %+v", p)
	}
	d.NotifyLeave(n)
	if s := state(tb, n.Name); s != Dead {
		t.Fatalf("after NotifyLeave: %v; want dead", s)
	}
}

// TestDeadAddrs: the addresses the reconnect loop tries are those of dead
// members, not of left ones, nor one a live member (or this node) has now.
func TestDeadAddrs(t *testing.T) {
	tb := newTable("self", "c", time.Minute, func(int) time.Duration { return time.Second }, slog.New(slog.DiscardHandler))
	add := func(name, addr string, st State) {
		tb.members[name] = &member{peer: Peer{Addr: addr, State: st, Since: time.Now()}}
	}
	add("self", "10.0.0.1:7200", Alive)
	add("old-self", "10.0.0.1:7200", Dead) // this address, an earlier name
	add("b", "10.0.0.2:7200", Dead)
	add("c", "10.0.0.3:7200", Left)
	add("d-old", "10.0.0.4:7200", Dead) // wiped: d rejoined there as d-new
	add("d-new", "10.0.0.4:7200", Alive)
	add("e", "10.0.0.5:7200", Dead)
	add("e2", "10.0.0.5:7200", Dead)
	if got, want := tb.deadAddrs(), []string{"10.0.0.2:7200", "10.0.0.5:7200"}; !slices.Equal(got, want) {
		t.Fatalf("deadAddrs %v, want %v", got, want)
	}
}
