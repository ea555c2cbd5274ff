package discovery

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"
)

func testMeta() Meta {
	return Meta{Cell: "local", ID: 3, ClientAddr: "127.0.0.1:7000", PeerAddr: "[::1]:7100", DataID: "0f3a9c-d"}
}

func mustEncode(t testing.TB, m Meta, leaving bool) []byte {
	t.Helper()
	b, err := encodeMeta(m, leaving)
	if err != nil {
		t.Fatalf("encodeMeta(%+v): %v", m, err)
	}
	return b
}

func TestMetaRoundTrip(t *testing.T) {
	long := testMeta()
	long.Cell = strings.Repeat("c", MaxNameLen)
	long.DataID = strings.Repeat("d", MaxNameLen)
	long.ClientAddr = strings.Repeat("h", 180) + ":65535"
	long.ID = 1<<64 - 1
	spare := testMeta()
	spare.Spare = true
	for _, m := range []Meta{testMeta(), long, spare} {
		for _, leaving := range []bool{false, true} {
			b := mustEncode(t, m, leaving)
			if len(b) > memberlist.MetaMaxSize {
				t.Fatalf("%d bytes encoded", len(b))
			}
			got, gotLeaving, err := decodeMeta(b)
			if err != nil || got != m || gotLeaving != leaving {
				t.Fatalf("decode(encode(%+v, %v)) = %+v, %v, %v", m, leaving, got, gotLeaving, err)
			}
		}
	}
}

// rawMeta encodes fields as encodeMeta does, without validating them.
func rawMeta(version, flags byte, id uint64, strs ...string) []byte {
	b := binary.BigEndian.AppendUint64([]byte{version, flags}, id)
	for _, s := range strs {
		b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
		b = append(b, s...)
	}
	return b
}

func TestDecodeMetaBad(t *testing.T) {
	good := mustEncode(t, testMeta(), false)
	const c, d, ca, pa = "local", "data1", "127.0.0.1:7000", "127.0.0.1:7100"
	for _, tc := range []struct {
		name  string
		in    []byte
		field string
	}{
		{"nil", nil, ""},
		{"one byte", []byte{metaVersion}, ""},
		{"version 0", rawMeta(0, 0, 1, c, d, ca, pa), ""},
		{"version 2", rawMeta(2, 0, 1, c, d, ca, pa), ""},
		{"unknown flag", rawMeta(1, 8, 1, c, d, ca, pa), ""},
		{"short id", []byte{1, 0, 0, 0, 1}, ""},
		{"no strings", rawMeta(1, 0, 1), ""},
		{"short length", append(rawMeta(1, 0, 1, c, d, ca), 0), ""},
		{"length past end", good[:len(good)-1], ""},
		{"huge length", append(rawMeta(1, 0, 1, c, d, ca), 0xff, 0xff, 'x'), ""},
		{"trailing byte", append(bytes.Clone(good), 0), ""},
		{"over MetaMaxSize", append(bytes.Clone(good), make([]byte, memberlist.MetaMaxSize)...), ""},
		{"id 0", rawMeta(1, 0, 0, c, d, ca, pa), "ID"},
		{"empty cell", rawMeta(1, 0, 1, "", d, ca, pa), "Cell"},
		{"cell with space", rawMeta(1, 0, 1, "a b", d, ca, pa), "Cell"},
		{"cell with NUL", rawMeta(1, 0, 1, "a\x00", d, ca, pa), "Cell"},
		{"cell too long", rawMeta(1, 0, 1, strings.Repeat("c", MaxNameLen+1), d, ca, pa), "Cell"},
		{"empty data id", rawMeta(1, 0, 1, c, "", ca, pa), "DataID"},
		{"data id with slash", rawMeta(1, 0, 1, c, "a/b", ca, pa), "DataID"},
		{"empty client addr", rawMeta(1, 0, 1, c, d, "", pa), "ClientAddr"},
		{"client addr without port", rawMeta(1, 0, 1, c, d, "127.0.0.1", pa), "ClientAddr"},
		{"client addr without host", rawMeta(1, 0, 1, c, d, ":7000", pa), "ClientAddr"},
		{"client port 0", rawMeta(1, 0, 1, c, d, "h:0", pa), "ClientAddr"},
		{"client port too big", rawMeta(1, 0, 1, c, d, "h:65536", pa), "ClientAddr"},
		{"client port named", rawMeta(1, 0, 1, c, d, "h:http", pa), "ClientAddr"},
		{"client addr too long", rawMeta(1, 0, 1, c, d, strings.Repeat("h", MaxAddrLen)+":1", pa), "ClientAddr"},
		{"empty peer addr", rawMeta(1, 0, 1, c, d, ca, ""), "PeerAddr"},
		{"peer addr too long", rawMeta(1, 0, 1, c, d, ca, strings.Repeat("h", MaxAddrLen)+":1"), "PeerAddr"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, leaving, err := decodeMeta(tc.in)
			var me *MetaError
			if !errors.As(err, &me) {
				t.Fatalf("decodeMeta = %+v, %v, %v; want a *MetaError", m, leaving, err)
			}
			if me.Field != tc.field {
				t.Fatalf("error %q is about field %q; want %q", err, me.Field, tc.field)
			}
			if m != (Meta{}) || leaving {
				t.Fatalf("a failed decode returned %+v, %v", m, leaving)
			}
		})
	}
}

func TestEncodeMetaBad(t *testing.T) {
	big := testMeta()
	big.Cell, big.DataID = strings.Repeat("c", MaxNameLen), strings.Repeat("d", MaxNameLen)
	big.ClientAddr = strings.Repeat("h", MaxAddrLen-2) + ":1"
	big.PeerAddr = big.ClientAddr
	zero := testMeta()
	zero.ID = 0
	for _, tc := range []struct {
		m     Meta
		field string
	}{{Meta{}, "Cell"}, {zero, "ID"}, {big, ""}} {
		b, err := encodeMeta(tc.m, false)
		var me *MetaError
		if !errors.As(err, &me) || me.Field != tc.field {
			t.Errorf("encodeMeta(%+v) = %d bytes, %v; want a *MetaError about %q", tc.m, len(b), err, tc.field)
		}
	}
}

func FuzzDecodeMeta(f *testing.F) {
	f.Add(mustEncode(f, testMeta(), false))
	f.Add(mustEncode(f, testMeta(), true))
	f.Add(rawMeta(1, 0, 0, "", "", "", ""))
	f.Add(rawMeta(1, 0, 1, "c", "d", "h:1", "h:2"))
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, leaving, err := decodeMeta(b)
		if err != nil {
			var me *MetaError
			if !errors.As(err, &me) {
				t.Fatalf("error %v (%T) is not a *MetaError", err, err)
			}
			return
		}
		if err := m.validate(); err != nil {
			t.Fatalf("decoded meta %+v is not valid: %v", m, err)
		}
		again, err := encodeMeta(m, leaving)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("re-encoding %+v gave %x, %v; want the input %x", m, again, err, b)
		}
	})
}

// TestMetaConfig: the configuration a replica holds travels in its meta,
// up to MaxConfigMembers members, and a malformed one is refused.
func TestMetaConfig(t *testing.T) {
	m := testMeta()
	m.Config = ConfigMeta{Epoch: 7, Index: 1234, Members: [MaxConfigMembers]uint64{3, 1<<64 - 1, 9, 4, 5, 6, 7, 8, 2}}
	b := mustEncode(t, m, false)
	got, _, err := decodeMeta(b)
	if err != nil || got != m {
		t.Fatalf("decode(encode(%+v)) = %+v, %v", m, got, err)
	}
	if !got.Config.Holds(9) || got.Config.Holds(10) || got.Config.Holds(0) {
		t.Fatalf("Holds wrong for %+v", got.Config)
	}
	plain := mustEncode(t, testMeta(), false)
	if plain[1]&flagConfig != 0 {
		t.Fatal("a meta without a configuration has the config flag")
	}
	for name, c := range map[string]ConfigMeta{
		"no members":   {Epoch: 1},
		"gap":          {Members: [MaxConfigMembers]uint64{1, 0, 3}},
		"member twice": {Members: [MaxConfigMembers]uint64{1, 2, 1}},
	} {
		bad := testMeta()
		bad.Config = c
		if _, err := encodeMeta(bad, false); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
	short := mustEncode(t, m, false)
	for name, mut := range map[string]func([]byte) []byte{
		"zero count": func(b []byte) []byte { b = bytes.Clone(b[:len(b)-8*MaxConfigMembers-1]); return append(b, 0) },
		"count over": func(b []byte) []byte {
			b = bytes.Clone(b)
			b[len(b)-8*MaxConfigMembers-1] = MaxConfigMembers + 1
			return b
		},
		"id zero":   func(b []byte) []byte { b = bytes.Clone(b); clear(b[len(b)-8:]); return b },
		"truncated": func(b []byte) []byte { return b[:len(b)-3] },
		"trailing":  func(b []byte) []byte { return append(bytes.Clone(b), 1) },
	} {
		if _, _, err := decodeMeta(mut(short)); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}
