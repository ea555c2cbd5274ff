package client

import (
	"fmt"
	"sync"
	"testing"

	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/gen/chubby"
)

// TestConcurrentCallsOnOneSession: exactly-once calls made at once on one
// session all succeed. Each call's floor (the lowest number still in
// flight) must count every call numbered before it, or the cell takes a
// call whose number is below a floor already sent for finished and
// refuses it ("below the session's floor").
func TestConcurrentCallsOnOneSession(t *testing.T) {
	cl := celltest.Start(t, celltest.Options{InMemory: true})
	ctx := testCtx(t)
	c := must[*Client](t, "connect")(Connect(ctx, Config{Addrs: []string{cl.Addr}}))
	defer c.Close()
	s := must[*Session](t, "session")(c.NewSession(ctx))
	defer s.Close(ctx)
	must[*chubby.Stat](t, "mkdir")(s.Mkdir(ctx, "/f", MkdirOptions{}))
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for g := range 16 {
		wg.Go(func() {
			for i := range 100 {
				p := fmt.Sprintf("/f/g%d-%d", g, i)
				if _, err := s.Multi(ctx, []Cmp{CmpNotExists(p)}, []Op{OpCreate(p, nil)}); err != nil {
					mu.Lock()
					if failed++; failed <= 3 {
						t.Errorf("%s: %v", p, err)
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if failed > 0 {
		t.Fatalf("%d of %d calls failed", failed, 16*100)
	}
}

// TestFloorCountsEveryNumberedCall: a call numbered after another that
// has not yet been sent must not get a floor above the other's number.
// (The interleaving that broke it: A took its number, B took its number
// and was sent, then A was sent — and refused as below B's floor.)
func TestFloorCountsEveryNumberedCall(t *testing.T) {
	s := &Session{}
	seqA, _ := s.beginRequest()
	seqB, floorB := s.beginRequest()
	if floorB > seqA {
		t.Fatalf("call %d was sent with floor %d while call %d was in flight", seqB, floorB, seqA)
	}
	s.endRequest(seqA)
	if _, floorC := s.beginRequest(); floorC != seqB {
		t.Errorf("after %d ended, floor %d, want %d", seqA, floorC, seqB)
	}
}
