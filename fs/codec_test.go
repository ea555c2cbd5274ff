package fs

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/fsm"
)

// TestCloneResult: the copy a session saves shares nothing with the Result
// handed out, and loses nothing. The Result has every field set, so a new
// field fails here until cloneResult copies it.
func TestCloneResult(t *testing.T) {
	mode := chubby.LockMode_SHARED
	stat := func() *chubby.Stat {
		return &chubby.Stat{Path: "/f", Lock: &chubby.LockInfo{Mode: &mode, Holders: 2}, Acl: aclNamesOf("r", "w", "c")}
	}
	r := &fsm.Result_{
		Err:                &chubby.ChubbyError{Code: chubby.ErrorCode_NOT_MASTER, Message: "m", MasterAddress: ptr("a"), Epoch: ptr(int64(3))},
		Session:            ptr(chubby.SessionID(4)),
		Handle:             &chubby.Handle{Id: 5, Path: "/f"},
		Stat:               stat(),
		Sequencer:          &chubby.Sequencer{Path: "/f"},
		Created:            ptr(true),
		Waiting:            ptr(true),
		TimestampsReserved: ptr(int64(6)),
		Multi:              &chubby.MultiResponse{Succeeded: true, FailedCompare: ptr(int32(1)), Stats: []*chubby.Stat{stat(), stat()}},
	}
	v := reflect.ValueOf(r).Elem()
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("the fixture leaves Result.%s unset", v.Type().Field(i).Name)
		}
	}
	c := cloneResult(r)
	if !bytes.Equal(EncodeResult(c), EncodeResult(r)) || c.Err.Message != r.Err.Message {
		t.Fatalf("clone differs:\n%v\n%v", c, r)
	}
	if p := sharedPointer(reflect.ValueOf(r), reflect.ValueOf(c)); p != "" {
		t.Fatalf("clone shares %s with the original", p)
	}
}

// sharedPointer returns the path of the first pointer or slice a and b
// share, "" when none.
func sharedPointer(a, b reflect.Value) string {
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return ""
		}
		if a.Pointer() == b.Pointer() {
			return a.Type().String()
		}
		return sharedPointer(a.Elem(), b.Elem())
	case reflect.Slice:
		if a.Len() > 0 && b.Len() > 0 && a.Pointer() == b.Pointer() {
			return a.Type().String()
		}
		for i := range min(a.Len(), b.Len()) {
			if p := sharedPointer(a.Index(i), b.Index(i)); p != "" {
				return p
			}
		}
	case reflect.Struct:
		for i := range a.NumField() {
			if p := sharedPointer(a.Field(i), b.Field(i)); p != "" {
				return a.Type().Field(i).Name + "." + p
			}
		}
	}
	return ""
}
