package cell

import (
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/replica/vr"
)

// The chain of limits from a request to the log: every request that becomes
// one command must encode (fs.EncodeCommand) within vr.MaxEntryBytes, or
// the log refuses it. Server.submit checks every command's encoding against
// vr.MaxEntryBytes before the log sees it (TOO_LARGE, certain: nothing is
// held), and the edge checks keep every request the IDL's bounds allow
// within it, so a request at its documented bounds commits:
//
//   - a single content (Open's initial_content, SetContents, CreateFile)
//     is at most MAX_CONTENT_BYTES (256 KiB) beside a path of at most
//     MAX_PATH_BYTES and fixed fields: about 264 KiB, far within the
//     limit (TestEntryLimitChains encodes the worst case of every
//     command);
//   - a Multi carries up to MAX_MULTI_OPS paths and MAX_MULTI_COMPARES
//     paths of MAX_PATH_BYTES each besides its contents: its envelope
//     (the command without its contents' bytes) is at most
//     maxMultiEnvelopeBytes, so its contents may be at most
//     maxMultiContentBytes together.
const (
	// maxMultiEnvelopeBytes bounds the encoding of a Multi command less
	// its contents' bytes: 64 ops and 64 compares of 4096-byte paths with
	// every optional field set, a RequestID and the command's own fields.
	// TestEntryLimitChains encodes that worst case and checks this bound.
	maxMultiEnvelopeBytes = 540_000

	// maxMultiContentBytes is the most a Multi's contents may be together:
	// MAX_MULTI_BYTES, or less if one log entry could not hold that much
	// beside the worst-case envelope. With vr.MaxEntryBytes = 1 MiB it is
	// 508,576 bytes; an entry limit of 2 MiB (or anything from 1,588,576)
	// gives the documented MAX_MULTI_BYTES.
	maxMultiContentBytes = min(int(chubby.MAX_MULTI_BYTES), vr.MaxEntryBytes-maxMultiEnvelopeBytes)
)
