package vr

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Configuration is the membership in force: its voters and learners
// (Members, with Member.Learner), the epoch it belongs to, and the first
// primary of its epoch when that is a voter of it (Proposer, 0 for a
// cell's first configuration): the replica that proposed it, or, when
// that primary left the voters with it, the voter it named as its
// successor (Node.successor).
//
// A configuration entry whose voters equal those of the configuration in
// force keeps the epoch (adding, removing or re-addressing a learner, or
// re-addressing a voter); one whose voters differ, by exactly one, opens
// the next epoch. See reconfig.go for how and when each takes effect.
//
// OpenIndex and OpenView name the entry that opened the epoch (0 for a
// cell's first epoch): a voter change carries its own index and view, so
// that a replica that holds the configuration only in a snapshot can
// still tell others which entry committed (reconfig.go, adoptClosing).
//
// Retired lists replicas an operator took out (at most MaxRetired, the
// newest last): the core does nothing with it, but it travels with the
// configuration so that whoever is master later knows not to take them
// back by itself.
type Configuration struct {
	Epoch     uint64
	Proposer  uint64
	OpenIndex uint64
	OpenView  uint64
	Members   Members
	Retired   []uint64
}

// MaxRetired bounds Configuration.Retired.
const MaxRetired = 16

// Clone returns a copy of c.
func (c Configuration) Clone() Configuration {
	c.Members = c.Members.Clone()
	c.Retired = slices.Clone(c.Retired)
	return c
}

// retire returns retired with ids added (newest last, at most MaxRetired)
// and every id of members dropped.
func retireIDs(retired []uint64, members Members, ids ...uint64) []uint64 {
	var out []uint64
	for _, id := range append(slices.Clone(retired), ids...) {
		if id != 0 && !members.Contains(id) && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	if len(out) > MaxRetired {
		out = out[len(out)-MaxRetired:]
	}
	return out
}

// Voters returns the ids of the voters, in order.
func (m Members) Voters() []uint64 {
	var ids []uint64
	for _, x := range m {
		if !x.Learner {
			ids = append(ids, x.ID)
		}
	}
	return ids
}

// Get returns the member with id.
func (m Members) Get(id uint64) (Member, bool) {
	for _, x := range m {
		if x.ID == id {
			return x, true
		}
	}
	return Member{}, false
}

// IsVoter reports whether id is a voter of m.
func (m Members) IsVoter(id uint64) bool {
	x, ok := m.Get(id)
	return ok && !x.Learner
}

// ChangeKind classifies a proposed configuration against the one in force.
type ChangeKind uint8

const (
	// ChangeNone: the same members, roles and addresses.
	ChangeNone ChangeKind = iota
	// ChangeLearners: the same voters (ids), other learners or addresses.
	// It takes effect as soon as it is in a replica's log and keeps the
	// epoch: no quorum depends on it.
	ChangeLearners
	// ChangeVoters: exactly one voter added (a new replica or a promoted
	// learner) or taken out (removed or demoted). It opens the next epoch
	// once committed.
	ChangeVoters
)

// ErrBadConfigChange is returned for a configuration that differs from
// the one in force by more than one voter, or is not a valid
// configuration.
var ErrBadConfigChange = errors.New("vr: configuration change must add or remove at most one voter")

// Classify says what kind of change next is from cur.
func Classify(cur, next Members) (ChangeKind, error) {
	if err := next.Validate(); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrBadConfigChange, err)
	}
	a, b := cur.Voters(), next.Voters()
	diff := 0
	for _, id := range a {
		if !next.IsVoter(id) {
			diff++
		}
	}
	for _, id := range b {
		if !cur.IsVoter(id) {
			diff++
		}
	}
	switch {
	case diff > 1:
		return 0, ErrBadConfigChange
	case diff == 1:
		return ChangeVoters, nil
	case len(cur) == len(next) && equalMembers(cur, next):
		return ChangeNone, nil
	}
	return ChangeLearners, nil
}

func equalMembers(a, b Members) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

const configVersion = 2

// EncodeConfig returns the EntryConfig payload of c. A configuration
// without epoch, proposer or learners is written in the first format
// (EncodeMembers), so a new cell's entry 1 reads as it always did; any
// other in the second: version 2, epoch, proposer, the opening entry's
// index and view, count, then per member its id, a flags byte (1:
// learner) and its length-prefixed PackedAddr, then the count of retired
// ids and the ids.
func EncodeConfig(c Configuration) []byte {
	learners := len(c.Members.Voters()) != len(c.Members)
	if c.Epoch == 0 && c.Proposer == 0 && c.OpenIndex == 0 && c.OpenView == 0 && !learners && len(c.Retired) == 0 {
		return EncodeMembers(c.Members)
	}
	b := []byte{configVersion}
	b = binary.AppendUvarint(b, c.Epoch)
	b = binary.AppendUvarint(b, c.Proposer)
	b = binary.AppendUvarint(b, c.OpenIndex)
	b = binary.AppendUvarint(b, c.OpenView)
	b = binary.AppendUvarint(b, uint64(len(c.Members)))
	for _, x := range c.Members {
		a := x.PackedAddr()
		b = binary.AppendUvarint(b, x.ID)
		var flags byte
		if x.Learner {
			flags = 1
		}
		b = append(b, flags)
		b = binary.AppendUvarint(b, uint64(len(a)))
		b = append(b, a...)
	}
	b = binary.AppendUvarint(b, uint64(len(c.Retired)))
	for _, id := range c.Retired {
		b = binary.AppendUvarint(b, id)
	}
	return b
}

// DecodeConfig decodes and validates an EntryConfig payload of either
// format.
func DecodeConfig(b []byte) (Configuration, error) {
	if len(b) > 0 && b[0] == membersVersion {
		m, err := DecodeMembers(b)
		return Configuration{Members: m}, err
	}
	bad := errors.New("vr: malformed configuration")
	if len(b) == 0 || b[0] != configVersion {
		return Configuration{}, bad
	}
	r := reader{b: b[1:]}
	c := Configuration{Epoch: r.uvarint(), Proposer: r.uvarint(), OpenIndex: r.uvarint(), OpenView: r.uvarint()}
	n := r.uvarint()
	if r.bad || n == 0 || n > MaxMembers || c.Epoch >= maxEpoch || c.OpenIndex >= maxIndex || c.OpenView >= maxView {
		return Configuration{}, bad
	}
	c.Members = make(Members, 0, n)
	for range n {
		id := r.uvarint()
		flags := r.byte()
		a := r.bytes(MaxMemberAddr)
		if r.bad || flags > 1 {
			return Configuration{}, bad
		}
		client, peer := UnpackAddr(string(a))
		c.Members = append(c.Members, Member{ID: id, ClientAddr: client, PeerAddr: peer, Learner: flags == 1})
	}
	nr := r.uvarint()
	if r.bad || nr > MaxRetired {
		return Configuration{}, bad
	}
	for range nr {
		id := r.uvarint()
		if id == 0 || c.Members.Contains(id) || slices.Contains(c.Retired, id) {
			return Configuration{}, bad
		}
		c.Retired = append(c.Retired, id)
	}
	if r.bad || len(r.b) != 0 {
		return Configuration{}, bad
	}
	if err := c.Members.Validate(); err != nil {
		return Configuration{}, err
	}
	return c, nil
}

// reader decodes varints and length-prefixed bytes; bad sticks once any
// read fails.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) uvarint() uint64 {
	v, k := binary.Uvarint(r.b)
	if k <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[k:]
	return v
}

func (r *reader) byte() byte {
	if len(r.b) == 0 {
		r.bad = true
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) bytes(max uint64) []byte {
	l := r.uvarint()
	if r.bad || l > max || uint64(len(r.b)) < l {
		r.bad = true
		return nil
	}
	v := r.b[:l]
	r.b = r.b[l:]
	return v
}

// WithRole returns a copy of m in which member id is a learner or a voter.
func (m Members) WithRole(id uint64, learner bool) Members {
	m = m.Clone()
	for i := range m {
		if m[i].ID == id {
			m[i].Learner = learner
		}
	}
	return m
}

// Without returns a copy of m without member id.
func (m Members) Without(id uint64) Members {
	out := make(Members, 0, len(m))
	for _, x := range m {
		if x.ID != id {
			out = append(out, x)
		}
	}
	return out
}
