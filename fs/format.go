package fs

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Format versions. A snapshot (fsm.Snapshot.version) and a log entry
// (fsm.Command.version) each say which encoding they are in. A replica
// reads every version from the oldest it knows up to its own, and refuses
// a newer one with a *FormatError naming both (it was written by a newer
// release, whose meaning this one cannot know), so that a replica of an
// older release never applies, or misreads, what a newer one wrote.
const (
	// SnapshotVersion is the version Snapshot writes. 2 (before events)
	// is still read.
	SnapshotVersion = snapshotVersion
	// OldestSnapshotVersion is the oldest snapshot version Restore reads.
	OldestSnapshotVersion = 2
	// CommandVersion is the version of the command encoding this release
	// writes and the newest it applies. Commands of version 1 leave
	// Command.version unset, so the log of a cell from before versions is
	// version 1 as it stands.
	CommandVersion = 1
)

// FormatError is data of a format version this release does not read: a
// snapshot, a log entry or (package replica's LayoutError) a data
// directory. Upgrade, when set, is the command that converts data older
// than Oldest.
type FormatError struct {
	What    string // "snapshot", "log entry 12"
	Found   int32
	Newest  int32 // the newest version this release reads
	Oldest  int32 // the oldest version this release reads
	Upgrade string
}

func (e *FormatError) Error() string {
	if e.Found > e.Newest {
		return fmt.Sprintf("%s has format version %d, newer than version %d, the newest this chubbyd reads: "+
			"it was written by a newer release; run that release (or a later one)", e.What, e.Found, e.Newest)
	}
	msg := fmt.Sprintf("%s has format version %d, older than version %d, the oldest this chubbyd reads", e.What, e.Found, e.Oldest)
	if e.Upgrade != "" {
		msg += ": upgrade it with " + e.Upgrade
	}
	return msg
}

// snapshotUpgrade is what converts a snapshot older than
// OldestSnapshotVersion: the release that still reads it, restoring a
// cell whose backup this release then reads.
const snapshotUpgrade = "an older chubbyd release that reads it (chubbyd restore, serve the cell, then chubbyfs snapshot save with this release)"

// checkSnapshotVersion returns a *FormatError for a snapshot version this
// release does not read.
func checkSnapshotVersion(v int32) error {
	if v >= OldestSnapshotVersion && v <= SnapshotVersion {
		return nil
	}
	e := &FormatError{What: "snapshot", Found: v, Newest: SnapshotVersion, Oldest: OldestSnapshotVersion}
	if v < OldestSnapshotVersion {
		e.Upgrade = snapshotUpgrade
	}
	return e
}

// checkCommandVersion returns a *FormatError for a command of a version
// this release does not apply (unset: version 1).
func checkCommandVersion(v *int32) error {
	if v == nil || *v >= 1 && *v <= CommandVersion {
		return nil
	}
	return &FormatError{What: "log entry", Found: *v, Newest: CommandVersion, Oldest: 1}
}

// CheckCommand reports whether b, one encoded command of the log, is of a
// format version this release applies: nil, or an error wrapping a
// *FormatError (or the decode error of an entry that is not a command).
// A replica checks its whole log with it before it starts.
func CheckCommand(b []byte) error {
	_, err := DecodeCommand(b)
	return err
}

// SnapshotVersionOf returns the format version of an encoded snapshot
// without decoding the rest: Snapshot writes the version first. It fails
// when b does not start with it.
func SnapshotVersionOf(b []byte) (int32, error) {
	// Thrift binary: field type (1 byte, I32 = 8), field id (2 bytes, 1),
	// then the value, 4 bytes big-endian.
	if len(b) < 7 || b[0] != 8 || binary.BigEndian.Uint16(b[1:]) != 1 {
		return 0, errors.New("fs: not a snapshot: it does not start with its version")
	}
	return int32(binary.BigEndian.Uint32(b[3:])), nil
}
