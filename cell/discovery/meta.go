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
	knownFlags  = flagSpare | flagLeaving
)

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
	return checkName("DataID", m.DataID)
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
//	Cell | DataID | ClientAddr | PeerAddr
//
// each string as a 2-byte big-endian length and its bytes. It fails with a
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
	b := make([]byte, 0, 10+8+len(m.Cell)+len(m.DataID)+len(m.ClientAddr)+len(m.PeerAddr))
	b = append(b, metaVersion, flags)
	b = binary.BigEndian.AppendUint64(b, m.ID)
	for _, s := range []string{m.Cell, m.DataID, m.ClientAddr, m.PeerAddr} {
		b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
		b = append(b, s...)
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
