package discovery

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// nodeName is the memberlist name of the replica of m: its id and data
// directory identity, so that a replica whose disk was wiped is a new
// member and never collides with its former self.
func nodeName(m Meta) string { return fmt.Sprintf("%d-%s", m.ID, m.DataID) }

func errOtherCell(got, want string) error {
	return fmt.Errorf("discovery: member of cell %q, not %q", got, want)
}

// delegate is every memberlist delegate of one Discovery.
type delegate struct {
	cell  string
	table *table
	log   *slog.Logger
	meta  atomic.Pointer[[]byte] // this node's encoded meta
}

// admit checks that a node may be a member: its meta decodes, names this
// cell and matches its name.
func (d *delegate) admit(n *memberlist.Node) error {
	m, _, err := decodeMeta(n.Meta)
	switch {
	case err != nil:
		return err
	case m.Cell != d.cell:
		return errOtherCell(m.Cell, d.cell)
	case nodeName(m) != n.Name:
		return fmt.Errorf("discovery: node %q has the meta of %q", n.Name, nodeName(m))
	}
	return nil
}

// NotifyAlive refuses an alive message about a node that may not be a
// member; memberlist then ignores it (and logs the error).
func (d *delegate) NotifyAlive(n *memberlist.Node) error { return d.admit(n) }

// NotifyMerge refuses a join with a cluster holding any node that may not
// be a member, such as one of another cell.
func (d *delegate) NotifyMerge(peers []*memberlist.Node) error {
	for _, n := range peers {
		if err := d.admit(n); err != nil {
			return fmt.Errorf("refusing to merge with node %q at %s: %w", n.Name, n.Address(), err)
		}
	}
	return nil
}

func (d *delegate) NodeMeta(limit int) []byte {
	b := *d.meta.Load()
	if len(b) > limit { // encodeMeta keeps it within MetaMaxSize, the limit
		d.log.Error("discovery: node meta over memberlist's limit", "bytes", len(b), "limit", limit)
		return nil
	}
	return b
}

func (d *delegate) NotifyJoin(n *memberlist.Node)   { d.table.alive(n) }
func (d *delegate) NotifyUpdate(n *memberlist.Node) { d.table.alive(n) }
func (d *delegate) NotifyLeave(n *memberlist.Node)  { d.table.gone(n) }

func (d *delegate) NotifyConflict(existing, other *memberlist.Node) {
	d.log.Warn("discovery: two nodes with one name", "node", existing.Name,
		"addr", existing.Address(), "other_addr", other.Address())
}

func (d *delegate) AckPayload() []byte { return nil }

func (d *delegate) NotifyPingComplete(other *memberlist.Node, _ time.Duration, _ []byte) {
	d.table.acked(other.Name)
}

// Unused parts of memberlist.Delegate: discovery sends no messages of its
// own.
func (d *delegate) NotifyMsg([]byte)                  {}
func (d *delegate) GetBroadcasts(int, int) [][]byte   { return nil }
func (d *delegate) LocalState(bool) []byte            { return nil }
func (d *delegate) MergeRemoteState(_ []byte, _ bool) {}

var (
	_ memberlist.Delegate         = (*delegate)(nil)
	_ memberlist.EventDelegate    = (*delegate)(nil)
	_ memberlist.AliveDelegate    = (*delegate)(nil)
	_ memberlist.MergeDelegate    = (*delegate)(nil)
	_ memberlist.ConflictDelegate = (*delegate)(nil)
	_ memberlist.PingDelegate     = (*delegate)(nil)
)
