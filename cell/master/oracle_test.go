package master

import "testing"

// TestOracleTerms: a term hands out nothing before its reservation
// commits, then strictly increasing timestamps up to the mark; the next
// term starts above the mark in the state; a late answer of an earlier
// term changes nothing.
func TestOracleTerms(t *testing.T) {
	o := NewOracle(100)
	if _, ok := o.Take(1); ok {
		t.Fatal("a stopped oracle handed out a timestamp")
	}
	term := o.Reset(0)
	if _, ok := o.Take(1); ok {
		t.Fatal("handed out before a reservation committed")
	}
	tm, upto, ok := o.Want(1)
	if !ok || tm != term || upto != 100 {
		t.Fatalf("Want = %d, %d, %v", tm, upto, ok)
	}
	if _, _, again := o.Want(1); again {
		t.Fatal("a second reservation while one is in flight")
	}
	o.Reserved(term, upto)
	var last int64
	for i := range 10 {
		first, ok := o.Take(7)
		if !ok || first <= last {
			t.Fatalf("take %d: %d, %v after %d", i, first, ok, last)
		}
		last = first + 6
	}
	if _, ok := o.Take(100); ok {
		t.Fatal("handed out past the committed mark")
	}
	// Half the window is gone: Want asks for more, from the mark on.
	tm, upto, ok = o.Want(1)
	if !ok || upto != 200 {
		t.Fatalf("Want after 70 = %d, %d, %v", tm, upto, ok)
	}
	// Failover: the state holds 200 (committed meanwhile); the new term
	// starts above it, and the old term's answer is ignored.
	o.Stop()
	term2 := o.Reset(200)
	o.Reserved(tm, 200)
	if o.Available() != 0 {
		t.Fatal("an old term's reservation counted in the new term")
	}
	tm2, upto2, _ := o.Want(1)
	o.Reserved(tm2, upto2)
	if first, ok := o.Take(1); !ok || first != 201 || tm2 != term2 {
		t.Fatalf("the new term starts at %d (%v), want 201", first, ok)
	}
	// A request larger than a window reserves enough.
	o.Stop()
	o.Reset(upto2)
	tm3, upto3, _ := o.Want(1000)
	o.Reserved(tm3, upto3)
	if _, ok := o.Take(1000); !ok {
		t.Fatalf("1000 timestamps not available after reserving up to %d", upto3)
	}
	o.Failed(tm3)
}
