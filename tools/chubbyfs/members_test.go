package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell"
	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// startStaticCell starts a cell of n in-process replicas (ids 1..n) given
// their configuration up front (chubbyd's --peers), waits for its master,
// and returns them; they stop when the test ends.
func startStaticCell(t *testing.T, n int) []*cell.Server {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: starts a cell (skipped with -short)")
	}
	rc := celltest.StartStatic(t, n)
	rc.Master()
	servers := make([]*cell.Server, n)
	for i := range n {
		servers[i] = rc.Server(i)
	}
	return servers
}

// masterOf returns the index of the serving master, -1 if none.
func masterOf(servers []*cell.Server) int {
	for i, s := range servers {
		if s.IsMaster() {
			return i
		}
	}
	return -1
}

// membersOf runs members --json against addr and parses it.
func membersOf(t *testing.T, addr string) membersJSON {
	t.Helper()
	r := at(t, addr, "", "members", "--json")
	want(t, r, exitOK, "{", "")
	var m membersJSON
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		t.Fatalf("members --json: %v\n%s", err, r.stdout)
	}
	return m
}

func countMembers(m membersJSON, membership, role string) int {
	n := 0
	for _, r := range m.Members {
		if (membership == "" || r.Membership == membership) && (role == "" || r.Role == role) {
			n++
		}
	}
	return n
}

// TestMembers: members on a static three-replica cell, asked of a replica
// that is not the master, shows three voters, one the MASTER, as the
// master sees them; members remove of a replica that is not the master
// leaves two voters; removing an unknown id fails clearly.
func TestMembers(t *testing.T) {
	servers := startStaticCell(t, 3)
	mi := masterOf(servers)
	other := (mi + 1) % 3 // asked: members finds the master
	addr := servers[other].Addr()

	r := squeeze(at(t, addr, "", "members"))
	want(t, r, exitOK, "ID CLIENT ADDRESS PEER ADDRESS MEMBERSHIP ROLE GOSSIP BEHIND LAST CONTACT", "")
	for _, s := range []string{"cell: local", "master: " + strconv.Itoa(mi+1) + " at " + servers[mi].Addr(),
		"configuration: epoch ", "pending change none", "target size ", "decisions"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("members lacks %q:\n%s", s, r.stdout)
		}
	}
	if n := strings.Count(r.stdout, " voter "); n != 3 {
		t.Errorf("members shows %d voters, want 3:\n%s", n, r.stdout)
	}
	if n := strings.Count(r.stdout, " MASTER "); n != 1 {
		t.Errorf("members shows %d MASTER, want 1:\n%s", n, r.stdout)
	}
	// The master's own line: behind 0, last contact 0s ago.
	if !strings.Contains(r.stdout, strconv.Itoa(mi+1)+" "+servers[mi].Addr()) ||
		!strings.Contains(r.stdout, "voter MASTER - 0 0s ago") {
		t.Errorf("members lacks the master's line:\n%s", r.stdout)
	}

	m := membersOf(t, addr)
	if len(m.Members) != 3 || countMembers(m, "voter", "") != 3 || countMembers(m, "", "MASTER") != 1 ||
		m.MasterAddress != servers[mi].Addr() || m.Epoch <= 0 || m.PendingConfig != 0 || m.Decisions == nil {
		t.Fatalf("members --json = %+v", m)
	}
	for _, r := range m.Members {
		if r.PeerAddress == "" || r.Address == "" || r.Behind == nil || r.LastContactMs == nil {
			t.Errorf("member %+v: want addresses, behind and last contact (from the master)", r)
		}
	}

	// Remove a replica that is not the master, asking that very replica
	// (NOT_MASTER leads to the master).
	victim := (mi + 2) % 3
	id := strconv.Itoa(victim + 1)
	var removed removeJSON
	jsonOf(t, servers[victim].Addr(), "", exitOK, &removed, "members", "remove", "--json", id)
	if removed.ID != id || removed.LogIndex <= 0 {
		t.Errorf("members remove --json %s = %+v", id, removed)
	}
	// A voter change takes the cell through a view change: wait for the
	// new configuration under a master.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r := at(t, addr, "", "members", "--json")
		m = membersJSON{}
		err := json.Unmarshal([]byte(r.stdout), &m)
		if r.code == 0 && err == nil && countMembers(m, "voter", "") == 2 && len(m.Members) == 2 &&
			m.PendingConfig == 0 && countMembers(m, "", "MASTER") == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after members remove %s: exit %d, %+v, stderr %q", id, r.code, m, r.stderr)
		}
	}
	for _, r := range m.Members {
		if r.ID == id {
			t.Errorf("replica %s still listed: %+v", id, m)
		}
	}
	if !strings.Contains(strings.Join(m.Decisions, "\n"), "operator removes replica "+id) {
		t.Errorf("decisions %q lack the removal", m.Decisions)
	}
	r = squeeze(at(t, addr, "", "members"))
	if n := strings.Count(r.stdout, " voter "); r.code != 0 || n != 2 {
		t.Errorf("members after the removal shows %d voters, want 2:\n%s", n, r.stdout)
	}
	if !strings.Contains(r.stdout, "operator removes replica "+id) {
		t.Errorf("members does not show the removal among the decisions:\n%s", r.stdout)
	}

	// An unknown id, and the one just removed: not found, exit 1.
	want(t, at(t, addr, "", "members", "remove", "99"), exitRefused, "",
		"chubbyfs: members remove 99: not found: replica 99 is not in the configuration")
	want(t, at(t, addr, "", "members", "remove", id), exitRefused, "", "members remove "+id+": not found")

	// Down to one voter, the master: the text form says the change committed.
	second := strconv.Itoa((mi+1)%3 + 1)
	r = at(t, servers[mi].Addr(), "", "members", "remove", second)
	want(t, r, exitOK, "removed replica "+second+": configuration change at log index ", "")
	if !strings.HasSuffix(r.stdout, " committed\n") {
		t.Errorf("members remove says %q; want it to say the change committed", r.stdout)
	}
}

// TestMembersOneReplica: a one-replica cell is one voter, the master.
func TestMembersOneReplica(t *testing.T) {
	addr := startCell(t)
	m := membersOf(t, addr)
	if len(m.Members) != 1 || m.Members[0].Role != "MASTER" || m.Members[0].Membership != "voter" ||
		m.Members[0].Address != addr {
		t.Fatalf("members --json = %+v", m)
	}
	// The last voter cannot go.
	want(t, at(t, addr, "", "members", "remove", m.Members[0].ID), exitRefused, "", "is the last voter")
}

// TestPrintMembers: the table shows what the master did not report as
// "-", a replica not heard from as "never", and the last few decisions.
func TestPrintMembers(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	str := func(s string) *string { return &s }
	var decisions []string
	for i := range 8 {
		decisions = append(decisions, "decision "+strconv.Itoa(i))
	}
	epoch, pending, target := int64(4), int64(77), int32(5)
	st := &chubby.CellStatus{Cell: "c", MasterId: "1", MasterAddress: "a:1", Epoch: 4<<32 + 5,
		ConfigEpoch: &epoch, PendingConfig: &pending, TargetSize: &target, Decisions: decisions,
		Replicas: []*chubby.ReplicaStatus{
			{Id: "1", Address: "a:1", Role: chubby.ReplicaRole_MASTER, Membership: str("voter"), PeerAddress: str("a:2"),
				GossipState: str("alive"), Behind: i64(0), LastContactMs: i64(0)},
			{Id: "2", Address: "b:1", Role: chubby.ReplicaRole_REPLICA, Membership: str("learner"), PeerAddress: str("b:2"),
				GossipState: str("suspect"), Behind: i64(120), LastContactMs: i64(-1)},
			{Id: "3", Address: "c:1", Role: chubby.ReplicaRole_REPLICA, Membership: str("spare"), GossipState: str("alive")},
			{Id: "4", Address: "d:1", Role: chubby.ReplicaRole_REPLICA, Behind: i64(3), LastContactMs: i64(1500)},
		}}
	var b strings.Builder
	printMembers(&b, st)
	out := squeeze(result{stdout: b.String()}).stdout
	for _, s := range []string{
		"master: 1 at a:1, epoch 17179869189 (configuration epoch 4, view 4)",
		"configuration: epoch 4, pending change at log index 77, target size 5",
		"1 a:1 a:2 voter MASTER alive 0 0s ago",
		"2 b:1 b:2 learner REPLICA suspect 120 never",
		"3 c:1 - spare REPLICA alive - -",
		"4 d:1 - - REPLICA - 3 1.5s ago",
		"decisions (the last 5 of 8, newest last; --json for all):",
		"decision 3", "decision 7",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("table lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "decision 2") {
		t.Errorf("table shows more than the last 5 decisions:\n%s", out)
	}
	j := toMembersJSON(st)
	if len(j.Decisions) != 8 || j.Members[2].Behind != nil || *j.Members[1].LastContactMs != -1 || j.PendingConfig != 77 {
		t.Errorf("JSON form %+v", j)
	}
	b.Reset()
	printMembers(&b, &chubby.CellStatus{})
	if !strings.Contains(b.String(), "decisions:      none") || !strings.Contains(b.String(), "pending change none") {
		t.Errorf("empty status:\n%s", b.String())
	}
}

// TestRemoveFailedExitStatus: members remove exits 3 when its change may
// still take effect (the cell says the outcome is unknown, or the answer
// was lost on the way) and 1 when it was refused (nothing changed).
func TestRemoveFailedExitStatus(t *testing.T) {
	unavailable := func(msg string) error {
		return &client.OpError{Op: "remove-member", Path: "3", Err: &chubby.ChubbyError{Code: chubby.ErrorCode_UNAVAILABLE, Message: msg}}
	}
	for _, tc := range []struct {
		name string
		err  error
		code int
		msg  string
	}{
		{"proposed, not known committed", unavailable("outcome unknown: the removal of replica 3 (configuration change at log index 37) was proposed but is not known committed: it may still take effect; check with chubbyfs members"),
			exitUnknown, "log index 37"},
		{"another change in progress", unavailable("a configuration change is in progress; retry shortly"), exitRefused, "in progress"},
		{"lost in a view change", unavailable("the removal of replica 3 (configuration change at log index 37) was lost in a view change before it committed: nothing changed; retry"),
			exitRefused, "nothing changed"},
		{"not found", &chubby.ChubbyError{Code: chubby.ErrorCode_NOT_FOUND, Message: "replica 3 is not in the configuration"}, exitRefused, "not found"},
		{"no replica reachable", &client.OpError{Op: "remove-member", Err: fmt.Errorf("%w at 127.0.0.1:1: refused", client.ErrUnreachable)}, exitRefused, "reach"},
		{"deadline passed in flight", &client.OpError{Op: "remove-member", Err: context.DeadlineExceeded}, exitUnknown, "may still take effect"},
	} {
		var ee *exitError
		if err := removeFailed("3", tc.err); !errors.As(err, &ee) || ee.code != tc.code || !strings.Contains(ee.msg, tc.msg) {
			t.Errorf("%s: removeFailed = %v; want exit %d with %q", tc.name, err, tc.code, tc.msg)
		}
	}
}

// TestPrintStatus: status shows the epoch's two parts, and "-" with a
// legend for a committed op the answering replica does not know.
func TestPrintStatus(t *testing.T) {
	st := &chubby.CellStatus{Cell: "c", MasterId: "2", MasterAddress: "b:1", Epoch: 17179869189, Version: "0.1.0",
		CommittedOp: 42, Replicas: []*chubby.ReplicaStatus{
			{Id: "1", Address: "a:1", Role: chubby.ReplicaRole_REPLICA, CommittedOp: -1},
			{Id: "2", Address: "b:1", Role: chubby.ReplicaRole_MASTER, CommittedOp: 42},
		}}
	var b strings.Builder
	printStatus(&b, st)
	out := squeeze(result{stdout: b.String()}).stdout
	for _, s := range []string{
		"master: 2 at b:1, epoch 17179869189 (configuration epoch 4, view 4)",
		"1 a:1 replica -\n", "2 b:1 master 42\n", "(COMMITTED -: not reported;",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("status lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "-1") {
		t.Errorf("status shows -1:\n%s", out)
	}
	// watch's master-changed line splits the epoch too.
	if l := (watchLine{Time: "t", Kind: "master-changed", Path: "/", Epoch: 17179869189}).text(); !strings.HasSuffix(l, " epoch=17179869189 (configuration epoch 4, view 4)") {
		t.Errorf("watch line %q", l)
	}
	// Every committed op known: no legend. No master: said so.
	st.Replicas, st.Epoch = st.Replicas[1:], 0
	b.Reset()
	printStatus(&b, st)
	if out := b.String(); strings.Contains(out, "not reported") || !strings.Contains(out, "epoch 0 (no master)") {
		t.Errorf("status of one known replica and no master:\n%s", out)
	}
}

// TestStatusOfASpare: status of a replica that no cell has added yet says
// it knows no master and exits 1 (it said "master:  at , epoch 0" and
// exited 0).
func TestStatusOfASpare(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a replica")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := cell.New(cell.Config{Cell: "spare-test", Listener: ln, PeerListener: pl, GossipListen: "127.0.0.1:0",
		Join: []string{"127.0.0.1:1"}, DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background()) }()
	t.Cleanup(func() { s.Stop(); <-done })
	r := at(t, s.Addr(), "", "status")
	if r.code != exitRefused || !strings.Contains(r.stdout, "master:     none known") {
		t.Fatalf("status of a spare: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := at(t, s.Addr(), "", "status", "--json"); r.code != exitRefused || !strings.Contains(r.stdout, `"master_address": ""`) {
		t.Fatalf("status --json of a spare: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
