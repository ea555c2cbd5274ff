package discovery

import (
	"encoding/binary"
	"fmt"
	"net"
	"strconv"

	"github.com/hashicorp/memberlist"
)

// Limits of the fields of a Meta.
const (
	MaxNameLen = 64  // Cell and DataID, in bytes
	MaxAddrLen = 256 // ClientAddr and PeerAddr, in bytes
)

// metaVersion is the first byte of every encoded Meta.
const metaVersion = 1

// Flag bits of the encoded meta's second byte.
const (
	flagSpare   = 1 << 0
	flagLeaving = 1 << 1 // set by Leave before it leaves; see peerState
	flagConfig  = 1 << 2 // a ConfigMeta follows the addresses
	knownFlags  = flagSpare | flagLeaving | flagConfig
)

// MaxConfigMembers bounds the members of a ConfigMeta (vr.MaxMembers).
const MaxConfigMembers = 9

// ConfigMeta is the configuration a replica holds in force, as its own log
// says: its epoch, a log index at which it is in force
// (vr.Info.ConfigIndex) and its members' ids, first, the unused slots
// 0. The zero ConfigMeta: the replica holds none (it has never been a member).
// Replicas compare them to learn that they were taken out of the cell
// while they heard nothing (cell: removedFrom), and the master to tell a
// replica that returns on its old data directory from a fresh spare.
type ConfigMeta struct {
	Epoch, Index uint64
	Members      [MaxConfigMembers]uint64
}

// Holds reports whether c names a member id (never for id 0).
func (c ConfigMeta) Holds(id uint64) bool {
	for _, m := range c.Members {
		if m == id && id != 0 {
			return true
		}
	}
	return false
}

// IsZero reports whether c is the zero ConfigMeta: no configuration.
func (c ConfigMeta) IsZero() bool { return c == ConfigMeta{} }

// Meta is what each replica gossips about itself.
type Meta struct {
	// Cell is the name of the cell; members of other cells are refused.
	// 1 to MaxNameLen bytes of [A-Za-z0-9._-].
	Cell string
	// ID is the replica's id in the cell's configuration; not 0.
	ID uint64
	// ClientAddr and PeerAddr are the replica's client RPC and
	// replica-to-replica addresses: host:port, a numeric port, at most
	// MaxAddrLen bytes.
	ClientAddr, PeerAddr string
	// DataID identifies the replica's data directory: a random string made
	// with it, so that a replica whose disk was wiped rejoins as a new
	// member. 1 to MaxNameLen bytes of [A-Za-z0-9._-].
	DataID string
	// Spare marks a replica that is running but not in the cell's
	// configuration: a candidate to replace a failed member.
	Spare bool
	// Config is the configuration the replica holds in force (zero: none).
	Config ConfigMeta
}

// MetaError reports a Meta that is not valid, or node meta that does not
// decode.
type MetaError struct {
	Field  string // the Meta field at fault; empty for the encoding itself
	Reason string
}

func (e *MetaError) Error() string {
	if e.Field == "" {
		return "discovery: bad meta: " + e.Reason
	}
	return "discovery: bad meta: " + e.Field + ": " + e.Reason
}

func metaErr(field, format string, args ...any) *MetaError {
	return &MetaError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// validate reports the first field of m that is not valid, as a *MetaError.
func (m Meta) validate() error {
	if err := checkName("Cell", m.Cell); err != nil {
		return err
	}
	if m.ID == 0 {
		return metaErr("ID", "zero")
	}
	if err := checkAddr("ClientAddr", m.ClientAddr); err != nil {
		return err
	}
	if err := checkAddr("PeerAddr", m.PeerAddr); err != nil {
		return err
	}
	if err := m.Config.validate(); err != nil {
		return err
	}
	return checkName("DataID", m.DataID)
}

// validate: a ConfigMeta that is not zero has its members first, each once.
func (c ConfigMeta) validate() error {
	if c.IsZero() {
		return nil
	}
	n := c.count()
	if n == 0 {
		return metaErr("Config", "no members")
	}
	for i, id := range c.Members {
		switch {
		case i >= n && id != 0:
			return metaErr("Config", "member %d after an empty slot", id)
		case i < n && slicesIndex(c.Members[:i], id) >= 0:
			return metaErr("Config", "member %d twice", id)
		}
	}
	return nil
}

// count returns how many members c names before its first empty slot.
func (c ConfigMeta) count() int {
	n := 0
	for n < len(c.Members) && c.Members[n] != 0 {
		n++
	}
	return n
}

func slicesIndex(s []uint64, v uint64) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

func checkName(field, s string) error {
	if s == "" {
		return metaErr(field, "empty")
	}
	if len(s) > MaxNameLen {
		return metaErr(field, "%d bytes, more than %d", len(s), MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !nameByte(c) {
			return metaErr(field, "byte %#x at %d is not one of [A-Za-z0-9._-]", c, i)
		}
	}
	return nil
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '_' || c == '-'
}

func checkAddr(field, s string) error {
	if len(s) > MaxAddrLen {
		return metaErr(field, "%d bytes, more than %d", len(s), MaxAddrLen)
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return metaErr(field, "%q is not host:port", s)
	}
	if host == "" {
		return metaErr(field, "%q has no host", s)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return metaErr(field, "%q has no port number in 1-65535", s)
	}
	return nil
}

// encodeMeta encodes m as node meta:
//
//	version (1 byte, 1) | flags (1 byte) | ID (8 bytes, big-endian) |
//	Cell | DataID | ClientAddr | PeerAddr [| Config]
//
// each string as a 2-byte big-endian length and its bytes; with flag
// flagConfig (a Config that is not zero), Config follows: its epoch
// and index (8 bytes each, big-endian), the count of its members (1 byte)
// and their ids (8 bytes each). It fails with a
// *MetaError if m is not valid or the encoding exceeds
// memberlist.MetaMaxSize.
func encodeMeta(m Meta, leaving bool) ([]byte, error) {
	if err := m.validate(); err != nil {
		return nil, err
	}
	var flags byte
	if m.Spare {
		flags |= flagSpare
	}
	if leaving {
		flags |= flagLeaving
	}
	if !m.Config.IsZero() {
		flags |= flagConfig
	}
	b := make([]byte, 0, 10+8+len(m.Cell)+len(m.DataID)+len(m.ClientAddr)+len(m.PeerAddr)+17+8*MaxConfigMembers)
	b = append(b, metaVersion, flags)
	b = binary.BigEndian.AppendUint64(b, m.ID)
	for _, s := range []string{m.Cell, m.DataID, m.ClientAddr, m.PeerAddr} {
		b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
		b = append(b, s...)
	}
	if flags&flagConfig != 0 {
		b = binary.BigEndian.AppendUint64(b, m.Config.Epoch)
		b = binary.BigEndian.AppendUint64(b, m.Config.Index)
		n := m.Config.count()
		b = append(b, byte(n))
		for _, id := range m.Config.Members[:n] {
			b = binary.BigEndian.AppendUint64(b, id)
		}
	}
	if len(b) > memberlist.MetaMaxSize {
		return nil, metaErr("", "%d bytes encoded, more than %d", len(b), memberlist.MetaMaxSize)
	}
	return b, nil
}

// decodeMeta decodes node meta made by encodeMeta and validates it. Any
// failure is a *MetaError.
func decodeMeta(b []byte) (m Meta, leaving bool, err error) {
	if len(b) > memberlist.MetaMaxSize {
		return Meta{}, false, metaErr("", "%d bytes, more than %d", len(b), memberlist.MetaMaxSize)
	}
	r := metaReader{b: b}
	version, flags := r.byte(), r.byte()
	if r.short {
		return Meta{}, false, metaErr("", "%d bytes, too short", len(b))
	}
	if version != metaVersion {
		return Meta{}, false, metaErr("", "unknown version %d", version)
	}
	if flags&^knownFlags != 0 {
		return Meta{}, false, metaErr("", "unknown flags %#x", flags&^knownFlags)
	}
	m = Meta{ID: r.uint64(), Cell: r.string(), DataID: r.string(), Spare: flags&flagSpare != 0}
	m.ClientAddr, m.PeerAddr = r.string(), r.string()
	if flags&flagConfig != 0 {
		m.Config.Epoch, m.Config.Index = r.uint64(), r.uint64()
		n := int(r.byte())
		if n == 0 || n > MaxConfigMembers {
			return Meta{}, false, metaErr("Config", "%d members, want 1 to %d", n, MaxConfigMembers)
		}
		for i := range n {
			m.Config.Members[i] = r.uint64()
		}
		if m.Config.count() != n {
			return Meta{}, false, metaErr("Config", "a member id 0")
		}
	}
	if err := r.err(); err != nil {
		return Meta{}, false, err
	}
	if err := m.validate(); err != nil {
		return Meta{}, false, err
	}
	return m, flags&flagLeaving != 0, nil
}

// metaReader reads the fields of encoded meta; past the end it returns
// zero values and sets short.
type metaReader struct {
	b     []byte
	short bool
}

func (r *metaReader) take(n int) []byte {
	if r.short || len(r.b) < n {
		r.short = true
		return nil
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}

func (r *metaReader) byte() byte {
	if p := r.take(1); p != nil {
		return p[0]
	}
	return 0
}

func (r *metaReader) uint64() uint64 {
	if p := r.take(8); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

func (r *metaReader) string() string {
	p := r.take(2)
	if p == nil {
		return ""
	}
	return string(r.take(int(binary.BigEndian.Uint16(p))))
}

func (r *metaReader) err() error {
	switch {
	case r.short:
		return metaErr("", "truncated")
	case len(r.b) > 0:
		return metaErr("", "%d trailing bytes", len(r.b))
	}
	return nil
}
