package fs

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cloudwego/gopkg/protocol/thrift"
)

// Wire-format checking. The generated Thrift readers trust the type bytes
// they skip over (gopkg's Skip indexes a table with them and panics on
// bytes no writer produces), and size slices from length prefixes. So
// every encoding that comes from outside — a log entry, a snapshot — is
// walked first by checkWire, which never panics, rejects unknown types, and
// proves that every length is backed by bytes. Only then is it decoded.

// maxWireDepth bounds the nesting of structs and containers.
const maxWireDepth = 32

var errWireShort = errors.New("truncated")

// wireSchema names the list fields of a struct that a generated reader
// decodes. Such a reader trusts the list's length but not its declared
// element type: a list declared with another element type than the schema's
// would make it read out of step and take lengths from garbage. So for those
// fields the declared element type must match. Other fields (unknown ids,
// or known ids with another wire type) are skipped by the reader, which
// follows the declared types just as walkWire does.
type wireSchema map[int16]wireList

type wireList struct {
	elem thrift.TType
	sub  wireSchema // schema of struct elements; nil: they have no list fields
	// inner: the field is not a list but a struct with list fields
	// somewhere inside, whose schema is sub.
	inner bool
}

// Schemas of the structs that have list fields: snapshots (their
// sessions' saved answers are Results), commands through TrimEvents
// (Command.op.trim_events.acks) and Multi (Command.op.multi.compares and
// .ops), and results through Multi (Result.multi.stats).
var (
	resultSchema = wireSchema{9: {inner: true, sub: wireSchema{3: {elem: thrift.STRUCT}}}}

	snapNodeSchema    = wireSchema{14: {elem: thrift.I64}, 15: {elem: thrift.I64}}
	snapAnswerSchema  = wireSchema{2: {inner: true, sub: resultSchema}}
	snapSessionSchema = wireSchema{5: {elem: thrift.STRUCT, sub: snapAnswerSchema}, 7: {elem: thrift.STRUCT}}
	snapshotSchema    = wireSchema{
		6: {elem: thrift.STRUCT, sub: snapNodeSchema},
		7: {elem: thrift.STRUCT, sub: snapSessionSchema},
		8: {elem: thrift.STRUCT},
	}
	commandSchema = wireSchema{4: {inner: true, sub: wireSchema{
		13: {inner: true, sub: wireSchema{1: {elem: thrift.STRUCT}}},
		17: {inner: true, sub: wireSchema{2: {elem: thrift.STRUCT}, 3: {elem: thrift.STRUCT}}},
	}}}
)

// checkWire checks that b is exactly one well-formed Thrift binary struct
// with the list fields of schema.
func checkWire(b []byte, schema wireSchema) error {
	n, err := walkWire(b, thrift.STRUCT, schema, maxWireDepth)
	if err != nil {
		return err
	}
	if n != len(b) {
		return fmt.Errorf("%d trailing bytes", len(b)-n)
	}
	return nil
}

// wireSize returns the encoded size of a fixed-size type, 0 for the
// variable-size types and -1 for bytes that are no type at all.
func wireSize(t thrift.TType) int {
	switch t {
	case thrift.BOOL, thrift.BYTE:
		return 1
	case thrift.I16:
		return 2
	case thrift.I32:
		return 4
	case thrift.DOUBLE, thrift.I64:
		return 8
	case thrift.STRING, thrift.STRUCT, thrift.MAP, thrift.SET, thrift.LIST:
		return 0
	}
	return -1
}

// walkWire returns the size of the value of type t at the start of b. For
// a struct, schema names its list fields.
func walkWire(b []byte, t thrift.TType, schema wireSchema, depth int) (int, error) {
	if depth == 0 {
		return 0, errors.New("nested too deep")
	}
	sz := wireSize(t)
	switch {
	case sz < 0:
		return 0, fmt.Errorf("unknown type %d", t)
	case sz > 0:
		if len(b) < sz {
			return 0, errWireShort
		}
		return sz, nil
	}
	switch t {
	case thrift.STRING:
		if len(b) < 4 {
			return 0, errWireShort
		}
		n := int64(int32(binary.BigEndian.Uint32(b)))
		if n < 0 || n > int64(len(b)-4) {
			return 0, errWireShort
		}
		return 4 + int(n), nil
	case thrift.STRUCT:
		i := 0
		for {
			if i >= len(b) {
				return 0, errWireShort
			}
			ft := thrift.TType(b[i])
			i++
			if ft == thrift.STOP {
				return i, nil
			}
			if len(b)-i < 2 {
				return 0, errWireShort
			}
			id := int16(binary.BigEndian.Uint16(b[i:]))
			i += 2
			if l, ok := schema[id]; ok && l.inner && ft == thrift.STRUCT {
				n, err := walkWire(b[i:], ft, l.sub, depth-1)
				if err != nil {
					return 0, err
				}
				i += n
				continue
			}
			if l, ok := schema[id]; ok && !l.inner && ft == thrift.LIST {
				if len(b)-i < 5 {
					return 0, errWireShort
				}
				if et := thrift.TType(b[i]); et != l.elem {
					return 0, fmt.Errorf("field %d: list of type %d, want %d", id, et, l.elem)
				}
				count := int64(int32(binary.BigEndian.Uint32(b[i+1:])))
				n, err := walkElems(b[i:], 5, count, []thrift.TType{l.elem}, l.sub, depth)
				if err != nil {
					return 0, err
				}
				i += n
				continue
			}
			n, err := walkWire(b[i:], ft, nil, depth-1)
			if err != nil {
				return 0, err
			}
			i += n
		}
	case thrift.MAP:
		if len(b) < 6 {
			return 0, errWireShort
		}
		kt, vt := thrift.TType(b[0]), thrift.TType(b[1])
		count := int64(int32(binary.BigEndian.Uint32(b[2:])))
		return walkElems(b, 6, count, []thrift.TType{kt, vt}, nil, depth)
	default: // SET, LIST
		if len(b) < 5 {
			return 0, errWireShort
		}
		et := thrift.TType(b[0])
		count := int64(int32(binary.BigEndian.Uint32(b[1:])))
		return walkElems(b, 5, count, []thrift.TType{et}, nil, depth)
	}
}

// walkElems walks count container elements (each a sequence of the types
// ts; struct elements with schema sub) starting at offset i of b.
func walkElems(b []byte, i int, count int64, ts []thrift.TType, sub wireSchema, depth int) (int, error) {
	if count < 0 {
		return 0, errors.New("negative container size")
	}
	for _, t := range ts {
		if wireSize(t) < 0 {
			return 0, fmt.Errorf("unknown element type %d", t)
		}
	}
	// Every element takes at least one byte: a count larger than what is
	// left is corrupt (and must not reach a reader that allocates it).
	if count > int64(len(b)-i) {
		return 0, errWireShort
	}
	for j := int64(0); j < count; j++ {
		for _, t := range ts {
			n, err := walkWire(b[i:], t, sub, depth-1)
			if err != nil {
				return 0, err
			}
			i += n
		}
	}
	return i, nil
}

// fastRead checks b with checkWire (schema: see wireSchema) and decodes it into msg, which must then
// have consumed all of b. A panic of the generated reader (a bug in a
// dependency) is turned into an error as a last line of defence: decoding
// untrusted bytes must never bring a replica down.
func fastRead(b []byte, msg thrift.FastCodec, schema wireSchema) (err error) {
	if len(b) == 0 {
		return errors.New("empty")
	}
	if err := checkWire(b, schema); err != nil {
		return err
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("decoder panic: %v", r)
		}
	}()
	n, err := msg.FastRead(b)
	if err != nil {
		return err
	}
	if n != len(b) {
		return fmt.Errorf("%d trailing bytes", len(b)-n)
	}
	return nil
}
