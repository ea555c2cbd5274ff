package client

import (
	"errors"
	"fmt"
	"strings"

	"github.com/chubbygo/chubby/gen/chubby"
)

// Errors reported by the library itself, as opposed to the cell. Calls wrap
// them (in an *OpError), so test with errors.Is.
var (
	// ErrSessionExpired: the session ended without Close — the cell said
	// SESSION_EXPIRED, or the grace period after its local lease ran out
	// passed with no master reached. Its locks are gone and its handles
	// invalid. Code reports it as chubby.ErrorCode_SESSION_EXPIRED.
	ErrSessionExpired = errors.New("chubby: session expired")

	// ErrSessionClosed: the session was closed with Session.Close.
	ErrSessionClosed = errors.New("chubby: session closed")

	// ErrClientClosed: the Client was closed with Client.Close.
	ErrClientClosed = errors.New("chubby: client closed")

	// ErrUnreachable: no replica of the cell could be reached (connection
	// refused, reset, timed out) within the call's retry budget.
	ErrUnreachable = errors.New("chubby: cannot reach the cell")

	// ErrPoisoned: the call's handle was poisoned (Handle.Poison).
	ErrPoisoned = errors.New("chubby: handle poisoned")

	// ErrDirChanging: Handle.ReadDir of a directory too big for one reply
	// saw its children added or removed between pages on every attempt,
	// so it has no consistent listing to return. Retry later.
	ErrDirChanging = errors.New("chubby: directory changed during every attempt to list it")
)

// OpError records a failed call: the operation, the path it was about (empty
// for calls that name none) and the cause — a *chubby.ChubbyError from the
// cell, one of the Err* values above, a context error, or a transport error.
type OpError struct {
	Op   string // "open", "acquire", "get-contents", ...
	Path string // the node's path, or ""
	Err  error
}

// Error formats as "chubby: <op> <path>: <reason>", the reason being
// Describe(Err).
func (e *OpError) Error() string {
	if e.Path == "" {
		return "chubby: " + e.Op + ": " + Describe(e.Err)
	}
	return "chubby: " + e.Op + " " + e.Path + ": " + Describe(e.Err)
}

// Unwrap returns the cause, so errors.Is and errors.As see through an OpError.
func (e *OpError) Unwrap() error { return e.Err }

// Code returns the cell's error code carried by err (a *chubby.ChubbyError
// anywhere in its chain). ErrSessionExpired counts as SESSION_EXPIRED, so a
// session lost locally and one the cell reports look the same.
func Code(err error) (chubby.ErrorCode, bool) {
	var ce *chubby.ChubbyError
	if errors.As(err, &ce) && ce != nil {
		return ce.Code, true
	}
	if errors.Is(err, ErrSessionExpired) {
		return chubby.ErrorCode_SESSION_EXPIRED, true
	}
	return 0, false
}

// IsCode reports whether err carries the cell error code code (see Code).
func IsCode(err error, code chubby.ErrorCode) bool {
	c, ok := Code(err)
	return ok && c == code
}

// CodeText is the human form of an error code: "NOT_FOUND" → "not found".
func CodeText(code chubby.ErrorCode) string {
	s := code.String()
	if s == "<UNSET>" {
		return fmt.Sprintf("error %d", int64(code))
	}
	return strings.ReplaceAll(strings.ToLower(s), "_", " ")
}

// Describe gives the human-readable reason of err without the operation:
// "not found: no node /a/b" for a cell error, the error's text otherwise.
// (The generated ChubbyError.Error prints a Go struct, not meant for people.)
func Describe(err error) string {
	if err == nil {
		return "<nil>"
	}
	var ce *chubby.ChubbyError
	if errors.As(err, &ce) && ce != nil {
		s := CodeText(ce.Code)
		if ce.Message != "" {
			s += ": " + ce.Message
		}
		if ce.IsSetMasterAddress() && ce.GetMasterAddress() != "" {
			s += " (master at " + ce.GetMasterAddress() + ")"
		}
		return s
	}
	var oe *OpError
	if errors.As(err, &oe) {
		return Describe(oe.Err)
	}
	return strings.TrimPrefix(err.Error(), "chubby: ")
}

// newError builds a cell-style error detected locally, so that callers can
// test it with IsCode exactly as if the cell had refused the call.
func newError(code chubby.ErrorCode, format string, args ...any) *chubby.ChubbyError {
	return &chubby.ChubbyError{Code: code, Message: fmt.Sprintf(format, args...)}
}
