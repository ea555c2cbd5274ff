package recipe

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// Two ways to hand out unique ids, each strictly unique across every
// client of the cell (and across failovers: the calls are exactly-once):
//
//   - SequenceIDs takes them from a directory's sequential-name counter:
//     each Next creates a file dir/PREFIX with a sequential name (the
//     cell appends a 10-digit counter that belongs to the directory and
//     only grows) and deletes it again at once. The id is that counter
//     plus one, so ids start at 1 as CASCounter's do and 0 is never an
//     id. The ids increase, but are not dense: every sequential name made
//     in the directory, by any prefix, takes a number. Two calls per id
//     (one with Keep).
//   - CASCounter keeps the value in a file's content and adds by
//     compare-and-set on the content generation, retrying on
//     GENERATION_MISMATCH: a dense sequence 1, 2, 3... and Add(n) for a
//     block of n. One call per id when uncontended, more under contention
//     (each conflict costs a read and a retry).
//
// Failure semantics. A client that dies between calls leaves nothing
// behind but the ids it took. A SequenceIDs that dies between its two
// calls leaves one file in the directory (harmless: its number is never
// handed out again). A call that fails ambiguously — ctx ended or the
// session was lost while the write was in flight — may have taken a
// number that nobody is given: a gap in the CASCounter's sequence, never
// a duplicate. A master failover is invisible: the retried write is
// applied once and answered with its first answer. Deleting the
// directory (SequenceIDs) or the file (CASCounter) starts the count
// again from 1: ids are unique only while it lives.

// SequenceIDs hands out ids from the sequential-name counter of a
// directory. Safe for concurrent use.
type SequenceIDs struct {
	s    *client.Session
	base string // dir/prefix
	keep bool
}

// SequenceOptions modify SequenceIDs.
type SequenceOptions struct {
	// Prefix is the name before the counter (default "id-"): a name of
	// 1..245 bytes of [A-Za-z0-9._-].
	Prefix string
	// Keep keeps each id's file (permanent, empty) instead of deleting it:
	// one call per id, and a record of the ids handed out, but the
	// directory grows by one entry per id, up to the cell's limit. The
	// file of id N is named for the counter, N-1 (PREFIX0000000000 for 1).
	Keep bool
}

// sequenceDigits is the width of the counter the cell appends.
const sequenceDigits = 10

// NewSequenceIDs returns an id generator on the directory dir (created
// with its parents on first use) of session s.
func NewSequenceIDs(s *client.Session, dir string, opts SequenceOptions) (*SequenceIDs, error) {
	if s == nil {
		return nil, coordInvalid("sequence ids", dir, "no session")
	}
	if err := coordFilePath("sequence ids", dir); err != nil {
		return nil, err
	}
	if opts.Prefix == "" {
		opts.Prefix = "id-"
	}
	if err := coordName("sequence ids", dir, opts.Prefix); err != nil {
		return nil, err
	}
	if len(opts.Prefix) > chubby.MAX_NAME_BYTES-sequenceDigits {
		return nil, coordInvalid("sequence ids", dir, "prefix of %d bytes, at most %d allowed", len(opts.Prefix), chubby.MAX_NAME_BYTES-sequenceDigits)
	}
	return &SequenceIDs{s: s, base: path.Join(dir, opts.Prefix), keep: opts.Keep}, nil
}

// Next returns a new id (≥ 1): one more than the number the cell gave the
// sequential file it created.
func (q *SequenceIDs) Next(ctx context.Context) (int64, error) {
	st, err := q.s.CreateFile(ctx, q.base, nil, client.CreateOptions{Sequential: true, MakeParents: true})
	if err != nil {
		return 0, err
	}
	id, err := q.parse(st.GetPath())
	if err != nil {
		return 0, err
	}
	if !q.keep {
		if _, err := q.s.Multi(ctx, nil, []client.Op{client.OpDelete(st.GetPath(), false)}); err != nil {
			return 0, fmt.Errorf("sequence ids: id %d was taken, deleting %s failed: %w", id, st.GetPath(), err)
		}
	}
	return id, nil
}

// parse reads the id from the name the cell made.
func (q *SequenceIDs) parse(p string) (int64, error) {
	digits, ok := strings.CutPrefix(p, q.base)
	if !ok || len(digits) != sequenceDigits {
		return 0, fmt.Errorf("sequence ids: the cell made %q, not %s followed by %d digits", p, q.base, sequenceDigits)
	}
	id, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || id < 0 {
		return 0, fmt.Errorf("sequence ids: the cell made %q: %q is not a counter", p, digits)
	}
	return id + 1, nil
}

// CASCounter is a counter in a file's content (decimal ASCII; an empty
// file counts 0), added to by compare-and-set. Safe for concurrent use;
// one CASCounter serializes its own calls, so run several (on one session
// or many) for parallel callers.
type CASCounter struct {
	s    *client.Session
	path string

	mu    sync.Mutex
	h     *client.Handle // opened on first use
	known bool           // value and gen are what the file held at our last read or write
	value int64
	gen   int64
}

// maxCASAttempts bounds the compare-and-set retries of one Add.
const maxCASAttempts = 1000

// NewCASCounter returns the counter in the file path (created holding 0 on
// first use; its parent directory must exist) of session s.
func NewCASCounter(s *client.Session, path string) (*CASCounter, error) {
	if s == nil {
		return nil, coordInvalid("counter", path, "no session")
	}
	if err := coordFilePath("counter", path); err != nil {
		return nil, err
	}
	return &CASCounter{s: s, path: path}, nil
}

// Next adds 1 and returns the new value: 1, 2, 3, ...
func (c *CASCounter) Next(ctx context.Context) (int64, error) { return c.Add(ctx, 1) }

// Add adds n (≥ 1) and returns the new value v: the caller owns the n
// values v-n+1 .. v. It writes with the content generation it last saw,
// and on GENERATION_MISMATCH (another client added first) reads again and
// retries after a short random pause, at most 1000 times. An add past math.MaxInt64, and content that
// is not a number, are refused with INVALID_ARGUMENT (client.IsCode).
func (c *CASCounter) Add(ctx context.Context, n int64) (int64, error) {
	if n < 1 {
		return 0, coordInvalid("counter add", c.path, "add %d: want at least 1", n)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.open(ctx); err != nil {
		return 0, err
	}
	for attempt := range maxCASAttempts {
		if err := c.load(ctx); err != nil {
			return 0, err
		}
		if c.value > math.MaxInt64-n {
			return 0, coordInvalid("counter add", c.path, "%d + %d overflows", c.value, n)
		}
		st, err := c.h.SetContents(ctx, []byte(strconv.FormatInt(c.value+n, 10)), client.IfGeneration(c.gen))
		if err == nil {
			c.value, c.gen = c.value+n, st.GetContentGeneration()
			return c.value, nil
		}
		c.known = false
		if !client.IsCode(err, chubby.ErrorCode_GENERATION_MISMATCH) {
			return 0, err
		}
		if err := coordPause(ctx, casBackoff(attempt)); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("counter add %s: %d compare-and-set attempts lost to other writers", c.path, maxCASAttempts)
}

// casBackoff is the pause after the attempt-th lost compare-and-set in a
// row: random in [0, 2^attempt ms), at most 32 ms, so that contending
// clients spread out instead of colliding again on the next write.
func casBackoff(attempt int) time.Duration {
	ceiling := time.Millisecond << min(attempt, 5)
	return rand.N(ceiling)
}

// open opens (creating, holding 0) the counter's file, once.
func (c *CASCounter) open(ctx context.Context) error {
	if c.h != nil {
		return nil
	}
	h, err := c.s.Open(ctx, c.path, client.OpenOptions{Mode: chubby.OpenMode_READ_WRITE,
		Create: chubby.CreateMode_OPEN_OR_CREATE, InitialContent: []byte("0")})
	if err != nil {
		return err
	}
	c.h = h
	return nil
}

// load reads the value and generation unless they are known.
func (c *CASCounter) load(ctx context.Context) error {
	if c.known {
		return nil
	}
	data, st, err := c.h.GetContentsAndStat(ctx)
	if err != nil {
		return err
	}
	v, err := parseCounter(data)
	if err != nil {
		return &client.OpError{Op: "counter read", Path: c.path, Err: err}
	}
	c.value, c.gen, c.known = v, st.GetContentGeneration(), true
	return nil
}

// parseCounter reads a counter's content: a decimal number ≥ 0, with an
// optional trailing newline; empty is 0.
func parseCounter(data []byte) (int64, error) {
	s := strings.TrimSuffix(string(data), "\n")
	if s == "" {
		return 0, nil
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, &chubby.ChubbyError{Code: chubby.ErrorCode_INVALID_ARGUMENT, Message: fmt.Sprintf("content %.40q is not a counter (a decimal number)", s)}
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, &chubby.ChubbyError{Code: chubby.ErrorCode_INVALID_ARGUMENT, Message: fmt.Sprintf("content %.40q is out of range", s)}
	}
	return v, nil
}

// Close closes the counter's file handle.
func (c *CASCounter) Close(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.h == nil {
		return nil
	}
	h := c.h
	c.h, c.known = nil, false
	return h.Close(ctx)
}
