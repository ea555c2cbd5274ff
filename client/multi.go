package client

import (
	"context"

	"github.com/cloudwego/kitex/client/callopt"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/rpc"
)

// A Cmp is one condition of a Multi, checked against the cell's state
// before any of its ops.
type Cmp = *chubby.Compare

// CmpExists holds if path exists.
func CmpExists(path string) Cmp { return &chubby.Compare{Path: path, Kind: chubby.CompareKind_EXISTS} }

// CmpNotExists holds if path does not exist.
func CmpNotExists(path string) Cmp {
	return &chubby.Compare{Path: path, Kind: chubby.CompareKind_NOT_EXISTS}
}

// CmpGeneration holds if path exists with content generation gen.
func CmpGeneration(path string, gen int64) Cmp {
	return &chubby.Compare{Path: path, Kind: chubby.CompareKind_CONTENT_GENERATION, Value: &gen}
}

// CmpInstance holds if path exists as instance inst (not deleted and
// re-created since).
func CmpInstance(path string, inst int64) Cmp {
	return &chubby.Compare{Path: path, Kind: chubby.CompareKind_INSTANCE, Value: &inst}
}

// An Op is one change of a Multi.
type Op = *chubby.MultiOp

// OpCreate creates a file with content (EXISTS if present).
func OpCreate(path string, content []byte) Op {
	return &chubby.MultiOp{Kind: chubby.MultiOpKind_CREATE, Path: path, Content: orEmpty(content)}
}

// OpCreateEphemeral creates a file owned by the session: deleted when it
// ends.
func OpCreateEphemeral(path string, content []byte) Op {
	op := OpCreate(path, content)
	op.Ephemeral = boolPtr(true)
	return op
}

// OpMkdir creates a directory (its parent must exist).
func OpMkdir(path string) Op {
	return &chubby.MultiOp{Kind: chubby.MultiOpKind_CREATE, Path: path, Directory: boolPtr(true)}
}

// OpSet replaces a file's content.
func OpSet(path string, content []byte) Op {
	return &chubby.MultiOp{Kind: chubby.MultiOpKind_SET_CONTENTS, Path: path, Content: orEmpty(content)}
}

// OpSetIf replaces a file's content if its content generation is gen.
func OpSetIf(path string, content []byte, gen int64) Op {
	op := OpSet(path, content)
	op.ExpectedGeneration = &gen
	return op
}

// OpDelete deletes a node (a non-empty directory only when recursive).
func OpDelete(path string, recursive bool) Op {
	op := &chubby.MultiOp{Kind: chubby.MultiOpKind_DELETE, Path: path}
	if recursive {
		op.Recursive = boolPtr(true)
	}
	return op
}

func orEmpty(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// MultiResult is a Multi's answer.
type MultiResult struct {
	// Succeeded: every compare held and every op was applied.
	Succeeded bool
	// FailedCompare is the index of the first compare that did not hold
	// (when !Succeeded).
	FailedCompare int
	// Stats holds, when Succeeded, each op's node after it (a delete's
	// before it).
	Stats []*chubby.Stat
}

// Multi checks cmps and, if every one holds, applies ops in order, all or
// nothing, in one command of the cell (see chubby.MultiRequest): a compare
// that does not hold is an answer (Succeeded false), an op that cannot be
// applied is an error, and either way nothing changed. Exactly-once, like
// SetContents.
func (s *Session) Multi(ctx context.Context, cmps []Cmp, ops []Op) (MultiResult, error) {
	return s.MultiAsync(ctx, cmps, ops).Wait(ctx)
}

// MultiAsync is the asynchronous form of Multi.
func (s *Session) MultiAsync(ctx context.Context, cmps []Cmp, ops []Op) *rpc.Future[MultiResult] {
	return rpc.Go(ctx, func(ctx context.Context) (MultiResult, error) {
		req := &chubby.MultiRequest{Session: s.id, Compares: cmps, Ops: ops}
		if req.Compares == nil {
			req.Compares = []*chubby.Compare{}
		}
		// Write-through: our copies of what the ops touch go now and
		// again when it is done (the cell invalidates them too).
		drop := func() {
			for _, op := range ops {
				if op.Kind == chubby.MultiOpKind_DELETE {
					s.cache.dropTree(op.Path)
				} else {
					s.cache.drop(op.Path)
				}
			}
		}
		drop()
		defer drop()
		path := ""
		if len(ops) > 0 {
			path = ops[0].Path
		}
		r, err := sessionCall(ctx, s, s.onceSpec("multi", path, func(rid *chubby.RequestID) { req.Rid = rid }),
			func(ctx context.Context, o ...callopt.Option) (*chubby.MultiResponse, error) {
				return s.c.kc.Multi(ctx, req, o...)
			})
		if err != nil {
			return MultiResult{}, err
		}
		return MultiResult{Succeeded: r.GetSucceeded(), FailedCompare: int(r.GetFailedCompare()), Stats: r.GetStats()}, nil
	})
}
