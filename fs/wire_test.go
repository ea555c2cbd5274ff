package fs

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/chubbygo/chubby/gen/fsm"
	"github.com/cloudwego/gopkg/protocol/thrift"
)

// TestWireSchemas guards checkWire: every list field a generated reader
// decodes, in every struct reachable from the encodings fs reads, must be in
// the wire schema of its struct (else a list declared with another element
// type could make the reader allocate from garbage lengths).
func TestWireSchemas(t *testing.T) {
	schemas := map[reflect.Type]wireSchema{
		reflect.TypeFor[fsm.Snapshot]():    snapshotSchema,
		reflect.TypeFor[fsm.SnapNode]():    snapNodeSchema,
		reflect.TypeFor[fsm.SnapSession](): snapSessionSchema,
	}
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type, wireSchema)
	walk = func(st reflect.Type, schema wireSchema) {
		if seen[st] {
			return
		}
		seen[st] = true
		if s, ok := schemas[st]; ok {
			schema = s
		}
		for i := 0; i < st.NumField(); i++ {
			f := st.Field(i)
			tag := strings.Split(f.Tag.Get("thrift"), ",")
			if len(tag) < 2 {
				continue
			}
			id, _ := strconv.Atoi(tag[1])
			ft := f.Type
			if ft.Kind() == reflect.Slice && ft.Elem().Kind() != reflect.Uint8 {
				l, ok := schema[int16(id)]
				if !ok {
					t.Errorf("%s.%s (field %d) is a list missing from the wire schema", st.Name(), f.Name, id)
					continue
				}
				et := ft.Elem()
				if et.Kind() == reflect.Pointer {
					et = et.Elem()
				}
				switch et.Kind() {
				case reflect.Struct:
					if l.elem != thrift.STRUCT {
						t.Errorf("%s.%s: schema element type %d, want STRUCT", st.Name(), f.Name, l.elem)
					}
					walk(et, l.sub)
				case reflect.Int64:
					if l.elem != thrift.I64 {
						t.Errorf("%s.%s: schema element type %d, want I64", st.Name(), f.Name, l.elem)
					}
				default:
					t.Errorf("%s.%s: element kind %v not covered by this test", st.Name(), f.Name, et.Kind())
				}
				continue
			}
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				var sub wireSchema
				if l, ok := schema[int16(id)]; ok && l.inner {
					sub = l.sub
				}
				walk(ft, sub)
			}
			if ft.Kind() == reflect.Map {
				t.Errorf("%s.%s: maps are not covered by the wire schema", st.Name(), f.Name)
			}
		}
	}
	// Each encoding on its own: a struct reached from two of them (a Result
	// in a snapshot's saved answers) is checked under both schemas.
	for root, schema := range map[reflect.Type]wireSchema{
		reflect.TypeFor[fsm.Command]():  commandSchema,
		reflect.TypeFor[fsm.Result_]():  resultSchema,
		reflect.TypeFor[fsm.Snapshot](): nil,
	} {
		clear(seen)
		walk(root, schema)
	}
}

func TestCheckWire(t *testing.T) {
	good := EncodeCommand(&fsm.Command{TimeMs: 1, Op: opTick()})
	if err := checkWire(good, nil); err != nil {
		t.Fatal(err)
	}
	snap := New(DefaultLimits()).Snapshot()
	if err := checkWire(snap, snapshotSchema); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"unknown type":        {0x88, 0, 1, 0},
		"deep":                []byte(strings.Repeat("\x0c\x00\x01", 40) + strings.Repeat("\x00", 41)),
		"list longer than b":  {15, 0, 1, 12, 0, 0, 1, 0, 0},
		"map of unknown type": {13, 0, 1, 0x70, 0x70, 0, 0, 0, 1, 0},
		"short string":        {11, 0, 1, 0, 0, 0, 5, 'a', 0},
		"unterminated":        {8, 0, 1, 0, 0, 0, 1},
	} {
		if err := checkWire(b, nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// A snapshot list declared with the wrong element type.
	bad := []byte{15, 0, 6, 10, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	if err := checkWire(bad, snapshotSchema); err == nil {
		t.Error("mistyped snapshot list accepted")
	}
	if err := checkWire(bad, nil); err != nil {
		t.Errorf("the same list in a struct without schema: %v", err)
	}
}
