package rpc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cloudwego/gopkg/protocol/thrift"
	"github.com/cloudwego/kitex/pkg/remote"
	kthrift "github.com/cloudwego/kitex/pkg/remote/codec/thrift"
)

// DefaultMaxPayloadBytes bounds one framed request. A file's content is at
// most 256 KiB; the largest request (a KeepAlive naming 10,000 sessions) is
// under 200 KB.
const DefaultMaxPayloadBytes = 4 << 20

// errMalformed reports a request whose bytes are not well-formed Thrift.
var errMalformed = errors.New("rpc: malformed thrift payload")

// guardedCodec is Kitex's Thrift payload codec with a structural check of
// every framed request before it is decoded.
//
// Why: the generated FastRead trusts what the bytes claim. A list header
// claiming 2^31 elements makes it allocate that many at once (a 13-byte
// request ran a replica out of memory, which no recover catches), and a
// field type byte >= 0x80 makes gopkg's Skip panic. Walking the payload
// with Skip first (which checks every claimed length against the bytes
// actually present, and is run under recover) means decoding only ever
// sees well-formed data whose lists fit in the frame, so what it allocates
// is bounded by a small multiple of the frame size, itself bounded by
// MaxPayloadBytes. Unframed (buffered) requests need no check: Kitex
// already walks them with its skip decoder to find their end, reading real
// bytes, before decoding.
type guardedCodec struct{ inner remote.PayloadCodec }

func newGuardedCodec() remote.PayloadCodec { return guardedCodec{inner: kthrift.NewThriftCodec()} }

func (g guardedCodec) Marshal(ctx context.Context, m remote.Message, out remote.ByteBuffer) error {
	return g.inner.Marshal(ctx, m, out)
}

// MaxMethodNameBytes bounds the method name of a request: the longest of
// the services' is under 32 bytes. A longer one is refused before it is
// read, with an error that does not echo it (Kitex's "unknown method"
// reply and log line would carry the whole name: a 4 MB name made 4 MB
// log lines and a 2 MiB reply).
const MaxMethodNameBytes = 64

func (g guardedCodec) Unmarshal(ctx context.Context, m remote.Message, in remote.ByteBuffer) error {
	if n := m.PayloadLen(); n == 0 || n >= 8 { // shorter frames fail checkThriftMessage
		if head, err := in.Peek(8); err == nil {
			if err := checkMethodName(head); err != nil {
				return remote.NewTransError(remote.ProtocolError, err)
			}
		}
	}
	if n := m.PayloadLen(); n > 0 {
		buf, err := in.Peek(n)
		if err != nil {
			return remote.NewTransError(remote.ProtocolError, fmt.Errorf("%w: %v", errMalformed, err))
		}
		if err := checkThriftMessage(buf); err != nil {
			return remote.NewTransError(remote.ProtocolError, err)
		}
	}
	return g.inner.Unmarshal(ctx, m, in)
}

func (g guardedCodec) Name() string { return g.inner.Name() }

// checkMethodName checks the name length a binary-protocol message header
// starting head (at least 8 bytes) claims: strict (a negative version word,
// then the name's length) or old-style (the name's length first).
func checkMethodName(head []byte) error {
	n := int32(binary.BigEndian.Uint32(head))
	if n < 0 {
		n = int32(binary.BigEndian.Uint32(head[4:]))
	}
	if n < 0 || n > MaxMethodNameBytes {
		return fmt.Errorf("%w: a method name of %d bytes (at most %d)", errMalformed, n, MaxMethodNameBytes)
	}
	return nil
}

// checkThriftMessage checks that buf is a binary-protocol message header
// followed by one well-formed struct.
func checkThriftMessage(buf []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", errMalformed, r)
		}
	}()
	_, _, _, l, err := thrift.Binary.ReadMessageBegin(buf)
	if err != nil {
		return fmt.Errorf("%w: message header: %v", errMalformed, err)
	}
	if _, err := thrift.Binary.Skip(buf[l:], thrift.STRUCT); err != nil {
		return fmt.Errorf("%w: %v", errMalformed, err)
	}
	return nil
}
