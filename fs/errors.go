package fs

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/chubbygo/chubby/gen/chubby"
)

// Errorf returns a *chubby.ChubbyError with the given code and a formatted
// message. Every error the package returns, in a Result or from a read
// method, is one of these. Messages end up in replicated state (the
// exactly-once record of a session keeps its last Result), so they must be
// built from command and state data only, never from pointers or map order.
func Errorf(code chubby.ErrorCode, format string, args ...any) *chubby.ChubbyError {
	return &chubby.ChubbyError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Code returns the code of err when it is (or wraps) a *chubby.ChubbyError,
// 0 when err is nil, and INTERNAL for any other error.
func Code(err error) chubby.ErrorCode {
	if err == nil {
		return 0
	}
	var ce *chubby.ChubbyError
	if errors.As(err, &ce) && ce != nil {
		return ce.Code
	}
	return chubby.ErrorCode_INTERNAL
}

// asError turns a possibly nil *chubby.ChubbyError into an error without
// producing a non-nil interface holding a nil pointer.
func asError(e *chubby.ChubbyError) error {
	if e == nil {
		return nil
	}
	return e
}

// assert panics when an internal invariant is broken. It is for bugs only:
// no input, however malformed, may reach a failing assert.
func assert(ok bool, format string, args ...any) {
	if !ok {
		panic("fs: invariant broken: " + fmt.Sprintf(format, args...))
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
