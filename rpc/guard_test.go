package rpc

import (
	"encoding/binary"
	"errors"
	"testing"
)

func TestCheckThriftMessage(t *testing.T) {
	msg := func(body ...byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, 0x80010001)
		b = binary.BigEndian.AppendUint32(b, 4)
		b = append(b, "Echo"...)
		b = binary.BigEndian.AppendUint32(b, 7)
		return append(b, body...)
	}
	cases := []struct {
		name string
		buf  []byte
		ok   bool
	}{
		{"empty struct", msg(0), true},
		{"string field", msg(11, 0, 1, 0, 0, 0, 2, 'h', 'i', 0), true},
		{"list of two i32", msg(15, 0, 1, 8, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 2, 0), true},
		{"type byte over 0x80", msg(0x88, 0, 1, 1, 2, 3, 0), false},
		{"list claiming 2^31-1 structs", msg(15, 0, 1, 12, 0x7f, 0xff, 0xff, 0xff, 0), false},
		{"string longer than the frame", msg(11, 0, 1, 0x7f, 0, 0, 0, 'x', 0), false},
		{"truncated struct", msg(8, 0, 1, 0), false},
		{"no header", []byte{1, 2, 3}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := checkThriftMessage(c.buf)
			if c.ok != (err == nil) {
				t.Fatalf("checkThriftMessage: %v, want ok=%v", err, c.ok)
			}
			if err != nil && !errors.Is(err, errMalformed) {
				t.Fatalf("error %v is not errMalformed", err)
			}
		})
	}
}
