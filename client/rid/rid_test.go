package rid

import "testing"

func TestNumbers(t *testing.T) {
	var n Numbers
	type step struct {
		begin    bool   // Begin, else End(end)
		end      uint64 // End's number
		seq, flr uint64 // Begin's answer
		inFlight int
	}
	steps := []step{
		{begin: true, seq: 1, flr: 1, inFlight: 1},
		{begin: true, seq: 2, flr: 1, inFlight: 2}, // 1 still in flight: the floor stays
		{begin: true, seq: 3, flr: 1, inFlight: 3},
		{end: 2, inFlight: 2}, // out of order: the floor waits for 1
		{begin: true, seq: 4, flr: 1, inFlight: 3},
		{end: 1, inFlight: 2},
		{begin: true, seq: 5, flr: 3, inFlight: 3}, // 1 and 2 finished
		{end: 3, inFlight: 2},
		{end: 4, inFlight: 1},
		{end: 5, inFlight: 0},
		{end: 5, inFlight: 0},                      // twice: nothing
		{begin: true, seq: 6, flr: 6, inFlight: 1}, // nothing in flight: the floor is the call itself
	}
	for i, s := range steps {
		if s.begin {
			seq, floor := n.Begin()
			if seq != s.seq || floor != s.flr {
				t.Fatalf("step %d: Begin = %d, floor %d; want %d, floor %d", i, seq, floor, s.seq, s.flr)
			}
		} else {
			n.End(s.end)
		}
		if got := n.InFlight(); got != s.inFlight {
			t.Fatalf("step %d: %d in flight, want %d", i, got, s.inFlight)
		}
	}
}
