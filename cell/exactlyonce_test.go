package cell

import (
	"testing"

	"github.com/chubbygo/chubby/gen/chubby"
)

// TestRetriedRequestsApplyOnce: a state-changing request retried with the
// same RequestID (as a client does after a lost reply or a failover) takes
// effect once and gets the first answer again.
func TestRetriedRequestsApplyOnce(t *testing.T) {
	tc := startCell(t, Config{})
	s := tc.session("once")
	if _, err := tc.cli.Mkdir(ctx, &chubby.MkdirRequest{Session: s, Path: "/q"}); err != nil {
		t.Fatal(err)
	}
	seq := true
	create := &chubby.CreateFileRequest{Session: s, Path: "/q/job-", Sequential: &seq, Rid: &chubby.RequestID{Seq: 1, Floor: 1}}
	a := must[*chubby.Stat](t)(tc.cli.CreateFile(ctx, create))
	b := must[*chubby.Stat](t)(tc.cli.CreateFile(ctx, create))
	if a.Path != b.Path || a.Instance != b.Instance {
		t.Fatalf("retried sequential create made two nodes: %s and %s", a.Path, b.Path)
	}
	h := tc.open(s, "/f", chubby.CreateMode_OPEN_OR_CREATE, false)
	set := &chubby.SetContentsRequest{Handle: h, Content: []byte("x"), Rid: &chubby.RequestID{Seq: 2, Floor: 2}}
	st1 := must[*chubby.Stat](t)(tc.cli.SetContents(ctx, set))
	st2 := must[*chubby.Stat](t)(tc.cli.SetContents(ctx, set))
	if st1.ContentGeneration != st2.ContentGeneration {
		t.Fatalf("retried write applied twice: generations %d and %d", st1.ContentGeneration, st2.ContentGeneration)
	}
	try := &chubby.TryAcquireRequest{Handle: h, Mode: chubby.LockMode_EXCLUSIVE, Rid: &chubby.RequestID{Seq: 3, Floor: 3}}
	q1 := must[*chubby.Sequencer](t)(tc.cli.TryAcquire(ctx, try))
	q2 := must[*chubby.Sequencer](t)(tc.cli.TryAcquire(ctx, try))
	if q1.LockGeneration != q2.LockGeneration {
		t.Fatalf("retried TryAcquire: generations %d and %d", q1.LockGeneration, q2.LockGeneration)
	}
	// A waiting Acquire retried after it was granted returns the lock.
	q3 := must[*chubby.Sequencer](t)(tc.cli.Acquire(ctx, &chubby.AcquireRequest{Handle: h, Mode: chubby.LockMode_EXCLUSIVE, WaitMs: 100}))
	if q3.LockGeneration != q1.LockGeneration {
		t.Fatalf("Acquire by the holder: generation %d, holds %d", q3.LockGeneration, q1.LockGeneration)
	}
	bad := &chubby.SetContentsRequest{Handle: h, Content: []byte("y"), Rid: &chubby.RequestID{Seq: 4, Floor: 5}}
	_, err := tc.cli.SetContents(ctx, bad)
	wantCode(t, err, chubby.ErrorCode_INVALID_ARGUMENT)
}
