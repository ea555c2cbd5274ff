package sicheck

import (
	"math/rand"
	"reflect"
	"sort"
	"testing"
)

// want is the part of an Anomaly a test asserts: all but Detail.
type want struct {
	kind  Kind
	txn   int64
	other int64
	key   string
}

// got strips the details off as, failing t if one is empty.
func got(t *testing.T, as []Anomaly) []want {
	t.Helper()
	var ws []want
	for _, a := range as {
		if a.Detail == "" {
			t.Errorf("%v: empty Detail", a)
		}
		ws = append(ws, want{a.Kind, a.Txn, a.Other, a.Key})
	}
	return ws
}

// Helpers that keep the literal histories short: rd is a read, wr a
// committed transaction, ab an aborted one.
func rd(key string, writer int64) Read { return Read{Key: key, Writer: writer} }

func wr(start, commit int64, reads []Read, writes ...string) Txn {
	return Txn{Start: start, Commit: commit, Outcome: Committed, Reads: reads, Writes: writes}
}

func ab(start int64, reads []Read, writes ...string) Txn {
	return Txn{Start: start, Outcome: Aborted, Reads: reads, Writes: writes}
}

func reads(rs ...Read) []Read { return rs }

// cleanHistory is a correct SI history: interleaved transfers, a
// read-only snapshot, an aborted transfer, a delete read as absence, a
// write skew and a read of one's own write.
func cleanHistory() []Txn {
	return []Txn{
		wr(10, 11, nil, "x", "y", "z"),                           // opens the accounts
		wr(20, 25, reads(rd("x", 10), rd("y", 10)), "x", "y"),    // transfer x -> y
		wr(22, 24, reads(rd("z", 10)), "z"),                      // overlaps T20, other key
		wr(23, 26, reads(rd("x", 10), rd("y", 10), rd("z", 10))), // read-only: T20, T22 commit after 23
		wr(27, 29, reads(rd("x", 20)), "x"),
		ab(28, reads(rd("x", 20)), "x"), // loses to T27 (first committer)
		{Start: 31, Commit: 32, Outcome: Committed, Reads: reads(rd("z", 22)), Deletes: []string{"z"}},
		wr(33, 34, reads(rd("z", 0), rd("x", 27))), // z was deleted by T31
		// Write skew: both read x and y, each writes one, they overlap.
		wr(40, 42, reads(rd("x", 27), rd("y", 20)), "x"),
		wr(41, 43, reads(rd("x", 27), rd("y", 20)), "y"),
		wr(44, 45, reads(rd("x", 40), rd("x", 44)), "x"), // reads its own write
		wr(46, 47, reads(rd("z", 0)), "z"),               // re-opens z
		ab(48, reads(rd("z", 46), rd("y", 41))),          // an aborted reader read a proper snapshot
		wr(49, 49, reads(rd("x", 44))),                   // read-only, committed at its start as Percolator does
	}
}

func TestCheckClean(t *testing.T) {
	if as := Check(cleanHistory()); as != nil {
		t.Fatalf("clean history: %v", as)
	}
	if as := Check(nil); as != nil {
		t.Fatalf("empty history: %v", as)
	}
}

func TestCheckKinds(t *testing.T) {
	tests := []struct {
		name string
		h    []Txn
		want []want
	}{
		{"duplicate start", []Txn{wr(5, 6, nil, "x"), wr(5, 7, nil, "y")},
			[]want{{DuplicateStart, 5, 0, ""}}},
		{"start not positive", []Txn{{Start: 0, Outcome: Aborted}, {Start: -3, Outcome: Aborted}},
			[]want{{DuplicateStart, -3, 0, ""}, {DuplicateStart, 0, 0, ""}}},
		{"commit before start", []Txn{wr(5, 5, nil, "x")},
			[]want{{BadCommit, 5, 0, ""}}},
		{"commit twice", []Txn{wr(6, 10, nil, "x"), wr(5, 10, nil, "y")},
			[]want{{BadCommit, 6, 5, ""}}},
		{"unresolved", []Txn{{Start: 5, Commit: 6, Writes: []string{"x"}}},
			[]want{{Unresolved, 5, 0, ""}}},
		{"unknown writer", []Txn{wr(10, 11, reads(rd("x", 7)))},
			[]want{{UnknownWriter, 10, 7, "x"}}},
		{"not a writer", []Txn{wr(1, 2, nil, "x"), wr(3, 4, reads(rd("y", 1)))},
			[]want{{NotAWriter, 3, 1, "y"}}},
		{"read of a delete", []Txn{{Start: 1, Commit: 2, Outcome: Committed, Deletes: []string{"x"}}, wr(3, 4, reads(rd("x", 1)))},
			[]want{{NotAWriter, 3, 1, "x"}}},
		{"own start, not written", []Txn{wr(3, 4, reads(rd("y", 3)), "x")},
			[]want{{NotAWriter, 3, 3, "y"}}},
		{"aborted read", []Txn{ab(1, nil, "x"), wr(3, 4, reads(rd("x", 1)))},
			[]want{{AbortedRead, 3, 1, "x"}}},
		{"future read", []Txn{wr(1, 5, nil, "x"), wr(3, 4, reads(rd("x", 1)))},
			[]want{{FutureRead, 3, 1, "x"}}},
		{"stale read", []Txn{wr(1, 2, nil, "x"), wr(3, 4, nil, "x"), ab(5, reads(rd("x", 1)))},
			[]want{{StaleRead, 5, 3, "x"}}},
		{"stale absence", []Txn{wr(1, 2, nil, "x"), ab(3, reads(rd("x", 0)))},
			[]want{{StaleRead, 3, 1, "x"}}},
		{"stale past a delete", []Txn{wr(1, 2, nil, "x"), {Start: 3, Commit: 4, Outcome: Committed, Deletes: []string{"x"}}, ab(5, reads(rd("x", 1)))},
			[]want{{StaleRead, 5, 3, "x"}}},
		// A second writer of one key is always wrong for the snapshot
		// too, so NonRepeatable comes with the StaleRead of that read.
		{"non-repeatable", []Txn{wr(1, 2, nil, "x"), wr(3, 4, nil, "x"), ab(5, reads(rd("x", 3), rd("x", 1), rd("x", 1)))},
			[]want{{NonRepeatable, 5, 1, "x"}, {StaleRead, 5, 3, "x"}}},
		{"lost update", []Txn{wr(1, 4, nil, "x"), wr(2, 3, nil, "x")},
			[]want{{LostUpdate, 2, 1, "x"}}},
		{"lost update of deletes", []Txn{wr(1, 4, nil, "x"), {Start: 2, Commit: 3, Outcome: Committed, Deletes: []string{"x"}}},
			[]want{{LostUpdate, 2, 1, "x"}}},
		{"half visible", []Txn{wr(1, 2, nil, "x", "y"), wr(3, 4, nil, "x", "y"), ab(5, reads(rd("x", 3), rd("y", 1)))},
			[]want{{HalfVisible, 5, 3, "y"}, {StaleRead, 5, 3, "y"}}},
		{"read of an unresolved writer", []Txn{{Start: 1, Writes: []string{"x"}}, wr(3, 4, reads(rd("x", 1)))},
			[]want{{Unresolved, 1, 0, ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			as := Check(tt.h)
			if g := got(t, as); !reflect.DeepEqual(g, tt.want) {
				t.Fatalf("got %v\nwant %v\n%v", g, tt.want, as)
			}
		})
	}
}

func TestCheckBoundsOutput(t *testing.T) {
	var h []Txn
	for s := int64(2500); s > 0; s-- {
		h = append(h, Txn{Start: s}) // Unresolved, each
	}
	as := Check(h)
	if len(as) != maxAnomalies {
		t.Fatalf("%d anomalies, want %d", len(as), maxAnomalies)
	}
	for i, a := range as {
		if a.Kind != Unresolved || a.Txn != int64(i+1) {
			t.Fatalf("anomaly %d: %v, want unresolved T%d", i, a, i+1)
		}
	}
}

func TestStrings(t *testing.T) {
	for o, s := range map[Outcome]string{Unknown: "unknown", Committed: "committed", Aborted: "aborted", 7: "Outcome(7)"} {
		if o.String() != s {
			t.Errorf("Outcome(%d).String() = %q, want %q", int(o), o.String(), s)
		}
	}
	a := Anomaly{Kind: StaleRead, Txn: 5, Other: 3, Key: "x", Detail: "d"}
	if s := a.String(); s != `stale-read T5 other T3 key "x": d` {
		t.Errorf("Anomaly.String() = %q", s)
	}
	if s := (Anomaly{Kind: Unresolved, Txn: 5, Detail: "d"}).String(); s != "unresolved T5: d" {
		t.Errorf("Anomaly.String() = %q", s)
	}
}

// historyFromBytes builds a small, usually broken history from b.
func historyFromBytes(b []byte) []Txn {
	keys := []string{"", "a", "b", "c"}
	next := func() int {
		if len(b) == 0 {
			return 0
		}
		v := int(b[0])
		b = b[1:]
		return v
	}
	var h []Txn
	for len(b) > 0 && len(h) < 64 {
		t := Txn{Start: int64(next()%32) - 2, Commit: int64(next()%40) - 2, Outcome: Outcome(next() % 4)}
		n := next()
		for i := 0; i < n%6; i++ {
			t.Reads = append(t.Reads, Read{Key: keys[next()%4], Writer: int64(next()%34) - 2})
		}
		for i := 0; i < n/6%4; i++ {
			t.Writes = append(t.Writes, keys[next()%4])
		}
		for i := 0; i < n/24%3; i++ {
			t.Deletes = append(t.Deletes, keys[next()%4])
		}
		h = append(h, t)
	}
	return h
}

func FuzzCheck(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{5, 9, 1, 13, 1, 5, 3, 9, 1, 1, 7, 0})
	f.Add([]byte{1, 4, 1, 7, 1, 2, 2, 8, 1, 3, 0, 1, 3, 1, 1, 2, 1, 4})
	f.Fuzz(func(t *testing.T, b []byte) {
		h := historyFromBytes(b)
		as := Check(h)
		if as != nil && len(as) == 0 {
			t.Fatal("empty non-nil result")
		}
		if len(as) > maxAnomalies {
			t.Fatalf("%d anomalies", len(as))
		}
		for i := 1; i < len(as); i++ {
			if !less(as[i-1], as[i]) {
				t.Fatalf("not strictly sorted at %d: %v, %v", i, as[i-1], as[i])
			}
		}
		if again := Check(h); !reflect.DeepEqual(as, again) {
			t.Fatalf("not deterministic:\n%v\n%v", as, again)
		}
	})
}

// sim is a tiny in-memory MVCC store with a counter oracle: the source of
// correct SI histories.
type sim struct {
	rng      *rand.Rand
	perm     []int // of the keys, partly shuffled by pick
	now      int64
	keys     []string
	versions map[string][]version // by commit, as committed
}

// simulate returns a correct SI history of n finished transactions over
// nkeys keys, from seed: mostly transfers (read two keys, write both),
// some audits (read up to audit keys), some closes (read a key, delete it);
// at most 6 in flight; first-committer-wins aborts. The order of the
// history is shuffled: Check must not depend on it.
func simulate(seed int64, n, nkeys, audit int) []Txn {
	s := &sim{rng: rand.New(rand.NewSource(seed)), versions: make(map[string][]version)}
	for i := 0; i < nkeys; i++ {
		s.keys = append(s.keys, string(rune('a'+i%26))+string(rune('0'+i/26%10))+string(rune('0'+i/260)))
		s.perm = append(s.perm, i)
	}
	setup := &Txn{Start: s.tick(), Writes: s.keys}
	s.finish(setup)
	h := []Txn{*setup}
	var active []*Txn
	for len(h) < n {
		if len(active) == 0 || (len(active) < 6 && s.rng.Intn(2) == 0) {
			active = append(active, s.begin(audit))
			continue
		}
		i := s.rng.Intn(len(active))
		t := active[i]
		active[i] = active[len(active)-1]
		active = active[:len(active)-1]
		s.finish(t)
		h = append(h, *t)
	}
	s.rng.Shuffle(len(h), func(i, j int) { h[i], h[j] = h[j], h[i] })
	return h
}

func (s *sim) tick() int64 { s.now++; return s.now }

// begin starts a transaction and makes its reads (from its snapshot,
// which later commits do not change).
func (s *sim) begin(audit int) *Txn {
	t := &Txn{Start: s.tick()}
	switch p := s.rng.Intn(20); {
	case p < 14:
		t.Writes = s.pick(2)
		t.Reads = s.read(t.Start, t.Writes...)
	case p < 18:
		t.Reads = s.read(t.Start, s.pick(audit)...)
	default:
		t.Deletes = s.pick(1)
		t.Reads = s.read(t.Start, t.Deletes...)
	}
	return t
}

// pick returns n distinct random keys (all if there are fewer).
func (s *sim) pick(n int) []string {
	n = min(n, len(s.perm))
	keys := make([]string, n)
	for i := range keys {
		j := i + s.rng.Intn(len(s.perm)-i)
		s.perm[i], s.perm[j] = s.perm[j], s.perm[i]
		keys[i] = s.keys[s.perm[i]]
	}
	return keys
}

// read reads keys at snapshot at.
func (s *sim) read(at int64, keys ...string) []Read {
	var rs []Read
	for _, k := range keys {
		r := Read{Key: k}
		vs := s.versions[k]
		i := len(vs) - 1
		for i >= 0 && vs[i].commit > at {
			i--
		}
		if i >= 0 && !vs[i].deleted {
			r.Writer = vs[i].start
		}
		rs = append(rs, r)
	}
	return rs
}

// finish commits t, or aborts it if a write of one of its keys committed
// after it started.
func (s *sim) finish(t *Txn) {
	for _, k := range append(t.Writes[:len(t.Writes):len(t.Writes)], t.Deletes...) {
		if vs := s.versions[k]; len(vs) > 0 && vs[len(vs)-1].commit > t.Start {
			t.Outcome = Aborted
			return
		}
	}
	t.Outcome, t.Commit = Committed, s.tick()
	for _, k := range t.Writes {
		s.versions[k] = append(s.versions[k], version{t.Start, t.Commit, false})
	}
	for _, k := range t.Deletes {
		s.versions[k] = append(s.versions[k], version{t.Start, t.Commit, true})
	}
}

// clone copies h deeply enough to mutate reads and outcomes.
func clone(h []Txn) []Txn {
	c := make([]Txn, len(h))
	for i, t := range h {
		c[i] = t
		c[i].Reads = append([]Read(nil), t.Reads...)
	}
	return c
}

func TestCheckSimulated(t *testing.T) {
	h := simulate(1, 2000, 5, 5)
	var aborted, deletes int
	for _, tx := range h {
		if tx.Outcome == Aborted {
			aborted++
		}
		deletes += len(tx.Deletes)
	}
	if aborted == 0 || deletes == 0 {
		t.Fatalf("simulation has %d aborts and %d deletes: too weak a test", aborted, deletes)
	}
	if as := Check(h); as != nil {
		t.Fatalf("correct history: %d anomalies, first %v", len(as), as[0])
	}
	t.Run("aborted read", func(t *testing.T) { testAbortedRead(t, h) })
	t.Run("stale read", func(t *testing.T) { testStaleRead(t, h) })
	t.Run("lost update", func(t *testing.T) { testLostUpdate(t, h) })
}

// testAbortedRead makes a read see an aborted transaction's write.
func testAbortedRead(t *testing.T, h []Txn) {
	h = clone(h)
	for _, a := range h {
		if a.Outcome != Aborted || len(a.Writes) == 0 {
			continue
		}
		for i := range h {
			r := &h[i]
			for j := range r.Reads {
				if r.Start != a.Start && r.Reads[j].Key == a.Writes[0] {
					r.Reads[j].Writer = a.Start
					if g, w := got(t, Check(h)), []want{{AbortedRead, r.Start, a.Start, a.Writes[0]}}; !reflect.DeepEqual(g, w) {
						t.Fatalf("got %v, want %v", g, w)
					}
					return
				}
			}
		}
	}
	t.Fatal("no aborted writer and reader of its key")
}

// testStaleRead shifts a read's writer to an older version of its key.
func testStaleRead(t *testing.T, h []Txn) {
	h = clone(h)
	versions := committedVersions(h)
	for i := range h {
		r := &h[i]
		for j, read := range r.Reads {
			older, ok := olderWriter(versions[read.Key], read.Writer)
			if !ok {
				continue
			}
			r.Reads[j].Writer = older
			as := Check(h)
			found := false
			for _, a := range as {
				found = found || (a == Anomaly{StaleRead, r.Start, read.Writer, read.Key, a.Detail})
				if a.Txn != r.Start || (a.Kind != StaleRead && a.Kind != HalfVisible) {
					t.Errorf("unexpected %v", a)
				}
			}
			if !found {
				t.Fatalf("T%d reading %q from T%d, not T%d: no stale read in %v", r.Start, read.Key, older, read.Writer, as)
			}
			return
		}
	}
	t.Fatal("no read with an older version")
}

// committedVersions returns the committed writes and deletes of each key
// of h, by commit.
func committedVersions(h []Txn) map[string][]version {
	vs := make(map[string][]version)
	for _, t := range h {
		if t.Outcome != Committed {
			continue
		}
		for _, k := range t.Writes {
			vs[k] = append(vs[k], version{t.Start, t.Commit, false})
		}
		for _, k := range t.Deletes {
			vs[k] = append(vs[k], version{t.Start, t.Commit, true})
		}
	}
	for _, v := range vs {
		sort.Slice(v, func(i, j int) bool { return v[i].commit < v[j].commit })
	}
	return vs
}

// olderWriter returns a writer (not deleter) of vs that committed before
// writer w did.
func olderWriter(vs []version, w int64) (int64, bool) {
	if w == 0 {
		return 0, false
	}
	i := len(vs) - 1
	for i >= 0 && vs[i].start != w {
		i--
	}
	for i--; i >= 0; i-- {
		if !vs[i].deleted {
			return vs[i].start, true
		}
	}
	return 0, false
}

// testLostUpdate commits an aborted transaction after every other, so that
// it and the writer it lost to both commit.
func testLostUpdate(t *testing.T, h []Txn) {
	h = clone(h)
	var last int64
	for _, tx := range h {
		last = max(last, tx.Start, tx.Commit)
	}
	for i := range h {
		a := &h[i]
		if a.Outcome != Aborted || len(a.Writes) == 0 {
			continue
		}
		a.Outcome, a.Commit = Committed, last+1
		as := Check(h)
		found := false
		for _, an := range as {
			found = found || an.Txn == a.Start || an.Other == a.Start
			if an.Kind != LostUpdate {
				t.Errorf("unexpected %v", an)
			}
		}
		if !found {
			t.Fatalf("T%d committed at %d: no lost update names it in %v", a.Start, a.Commit, as)
		}
		return
	}
	t.Fatal("no aborted writer")
}

// bigHistory is about 100,000 transactions and 1,000,000 reads.
func bigHistory() []Txn { return simulate(2, 100_000, 1000, 45) }

func TestCheckBig(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	h := bigHistory()
	n := 0
	for _, tx := range h {
		n += len(tx.Reads)
	}
	t.Logf("%d transactions, %d reads", len(h), n)
	if as := Check(h); as != nil {
		t.Fatalf("correct history: %d anomalies, first %v", len(as), as[0])
	}
}

func BenchmarkCheck(b *testing.B) {
	h := bigHistory()
	b.ResetTimer()
	for range b.N {
		if as := Check(h); as != nil {
			b.Fatal(as[0])
		}
	}
}
