package client

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/chubbygo/chubby/gen/chubby"
)

// sequencerPrefix starts the printable form of a sequencer (see idl/chubby.thrift):
//
//	chubby-seq:v1:<E|S>:<lock_generation>:<instance>:<path>
const sequencerPrefix = "chubby-seq:v1:"

// FormatSequencer returns the printable form of seq,
// "chubby-seq:v1:<E|S>:<lock_generation>:<instance>:<path>", which is how the
// CLI hands a sequencer to a program (CHUBBY_SEQUENCER) and how a program
// passes it on to the servers it talks to. A sequencer from the cell always
// formats to a string ParseSequencer accepts; an invalid one (unknown mode,
// negative numbers, bad path) formats to a string it rejects. FormatSequencer
// of nil is "".
func FormatSequencer(seq *chubby.Sequencer) string {
	if seq == nil {
		return ""
	}
	var mode string
	switch seq.Mode {
	case chubby.LockMode_EXCLUSIVE:
		mode = "E"
	case chubby.LockMode_SHARED:
		mode = "S"
	default:
		mode = "?" + strconv.FormatInt(int64(seq.Mode), 10)
	}
	return sequencerPrefix + mode + ":" +
		strconv.FormatInt(seq.LockGeneration, 10) + ":" +
		strconv.FormatInt(seq.Instance, 10) + ":" + seq.Path
}

// ParseSequencer parses the printable form made by FormatSequencer. It is
// strict, so that exactly one string names each sequencer: the mode is "E" or
// "S", both numbers are canonical non-negative decimals (no sign, no leading
// zeros) that fit an int64, and the path is valid by ValidatePath. For every
// s it accepts, FormatSequencer(ParseSequencer(s)) == s. A failure is a
// *chubby.ChubbyError with code INVALID_ARGUMENT.
func ParseSequencer(s string) (*chubby.Sequencer, error) {
	rest, ok := strings.CutPrefix(s, sequencerPrefix)
	if !ok {
		return nil, newError(chubby.ErrorCode_INVALID_ARGUMENT,
			"sequencer %q does not start with %q", truncate(s), sequencerPrefix)
	}
	// mode, lock generation, instance, path; the path is last and holds no
	// ':' when it is valid, so SplitN keeps any stray ':' for ValidatePath to reject.
	parts := strings.SplitN(rest, ":", 4)
	if len(parts) != 4 {
		return nil, newError(chubby.ErrorCode_INVALID_ARGUMENT,
			"sequencer %q: want chubby-seq:v1:<E|S>:<lock_generation>:<instance>:<path>", truncate(s))
	}
	seq := &chubby.Sequencer{Path: parts[3]}
	switch parts[0] {
	case "E":
		seq.Mode = chubby.LockMode_EXCLUSIVE
	case "S":
		seq.Mode = chubby.LockMode_SHARED
	default:
		return nil, newError(chubby.ErrorCode_INVALID_ARGUMENT,
			"sequencer %q: mode %q is not E or S", truncate(s), truncate(parts[0]))
	}
	var err error
	if seq.LockGeneration, err = parseCanonicalInt(parts[1]); err != nil {
		return nil, newError(chubby.ErrorCode_INVALID_ARGUMENT,
			"sequencer %q: lock generation: %v", truncate(s), err)
	}
	if seq.Instance, err = parseCanonicalInt(parts[2]); err != nil {
		return nil, newError(chubby.ErrorCode_INVALID_ARGUMENT,
			"sequencer %q: instance: %v", truncate(s), err)
	}
	if err := validatePath(seq.Path); err != nil {
		return nil, newError(chubby.ErrorCode_INVALID_ARGUMENT,
			"sequencer %q: %s", truncate(s), err.Message)
	}
	return seq, nil
}

// parseCanonicalInt parses a non-negative decimal int64 written the way
// strconv.FormatInt writes it.
func parseCanonicalInt(s string) (int64, error) {
	if s == "" {
		return 0, fmt.Errorf("empty number")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%q is not a non-negative decimal number", truncate(s))
		}
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, fmt.Errorf("%q has leading zeros", truncate(s))
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is out of range", truncate(s))
	}
	return n, nil
}

// ValidatePath reports whether p is a well-formed node path: "/" or an
// absolute slash path of 1..MAX_PATH_DEPTH components, each
// 1..MAX_NAME_BYTES bytes of [A-Za-z0-9._-] and not "." or "..", at most
// MAX_PATH_BYTES in all, with no empty component and no trailing slash.
// The cell enforces the same rules; the library lets callers (the CLI) fail early. A failure is a
// *chubby.ChubbyError with code INVALID_ARGUMENT.
func ValidatePath(p string) error {
	if err := validatePath(p); err != nil {
		return err
	}
	return nil
}

func validatePath(p string) *chubby.ChubbyError {
	if p == "" {
		return newError(chubby.ErrorCode_INVALID_ARGUMENT, "empty path")
	}
	if len(p) > chubby.MAX_PATH_BYTES {
		return newError(chubby.ErrorCode_INVALID_ARGUMENT,
			"path is %d bytes, at most %d allowed", len(p), chubby.MAX_PATH_BYTES)
	}
	if p[0] != '/' {
		return newError(chubby.ErrorCode_INVALID_ARGUMENT, "path %q is not absolute", truncate(p))
	}
	if p == "/" {
		return nil
	}
	comps := strings.Split(p[1:], "/")
	if len(comps) > chubby.MAX_PATH_DEPTH {
		return newError(chubby.ErrorCode_INVALID_ARGUMENT,
			"path %q has %d components, at most %d allowed", truncate(p), len(comps), chubby.MAX_PATH_DEPTH)
	}
	for _, c := range comps {
		switch {
		case c == "":
			return newError(chubby.ErrorCode_INVALID_ARGUMENT, "path %q has an empty component", truncate(p))
		case c == "." || c == "..":
			return newError(chubby.ErrorCode_INVALID_ARGUMENT, "path %q has a %q component", truncate(p), c)
		case len(c) > chubby.MAX_NAME_BYTES:
			return newError(chubby.ErrorCode_INVALID_ARGUMENT,
				"path %q has a component of %d bytes, at most %d allowed", truncate(p), len(c), chubby.MAX_NAME_BYTES)
		}
		for i := 0; i < len(c); i++ {
			if !nameByte(c[i]) {
				return newError(chubby.ErrorCode_INVALID_ARGUMENT,
					"path %q: byte %q not allowed in a name (only A-Z a-z 0-9 . _ -)", truncate(p), c[i])
			}
		}
	}
	return nil
}

func nameByte(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' ||
		b == '.' || b == '_' || b == '-'
}

// truncate keeps error messages about hostile input short.
func truncate(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
