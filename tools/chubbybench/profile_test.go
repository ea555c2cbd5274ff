package main

import (
	"testing"

	"github.com/google/pprof/profile"
)

func TestPkgAndShortNames(t *testing.T) {
	cases := map[string]string{
		pkgOf("github.com/dgraph-io/badger/v4.(*DB).Update"):              "github.com/dgraph-io/badger/v4",
		pkgOf("runtime.mallocgc"):                                         "runtime",
		pkgOf("internal/runtime/syscall/linux.Syscall6"):                  "internal/runtime/syscall/linux",
		pkgOf("github.com/chubbygo/chubby/rpc.Go[go.shape.*uint8].func1"): "github.com/chubbygo/chubby/rpc",
		shortPkg("github.com/dgraph-io/badger/v4"):                        "badger/v4",
		shortPkg("internal/runtime/syscall/linux"):                        "syscall/linux",
		shortPkg("runtime"):                                               "runtime",
		shortFunc("github.com/chubbygo/chubby/cell.(*Server).propose"):    "cell.(*Server).propose",
	}
	for got, want := range cases {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

func TestCategorize(t *testing.T) {
	cases := []struct {
		stack []string
		want  string
	}{
		{[]string{"internal/runtime/syscall/linux.Syscall6", "syscall.Fdatasync", "os.(*File).Sync", "github.com/dgraph-io/badger/v4.(*DB).Sync"}, "log sync (fsync/msync)"},
		{[]string{"internal/runtime/syscall/linux.Syscall6", "golang.org/x/sys/unix.Msync", "github.com/dgraph-io/ristretto/v2/z.(*MmapFile).Sync", "github.com/dgraph-io/badger/v4.(*DB).Sync"}, "log sync (fsync/msync)"},
		{[]string{"runtime.scanobject", "runtime.gcDrain", "runtime.gcBgMarkWorker"}, "garbage collection"},
		{[]string{"runtime.mallocgc", "github.com/chubbygo/chubby/gen/chubby.(*Handle).FastRead"}, "Thrift encode/decode"},
		{[]string{"github.com/chubbygo/chubby/fs.(*State).apply"}, "fs state machine"},
		{[]string{"runtime.futex", "runtime.findRunnable", "runtime.schedule"}, "Go scheduler"},
		{[]string{"strings.Index"}, "other"},
	}
	for _, c := range cases {
		if got := categorize(c.stack); got != c.want {
			t.Errorf("categorize(%v) = %q, want %q", c.stack, got, c.want)
		}
	}
}

// summarizeProfile on a hand-made CPU profile: two stacks, 30 and 10 units.
func TestSummarizeProfile(t *testing.T) {
	fn := func(id uint64, name string) *profile.Function { return &profile.Function{ID: id, Name: name} }
	fSync, fBadger, fOurs, fCodec := fn(1, "syscall.Fdatasync"), fn(2, "github.com/dgraph-io/badger/v4.(*DB).Sync"),
		fn(3, "github.com/chubbygo/chubby/replica.(*Local).run"), fn(4, "github.com/chubbygo/chubby/gen/chubby.(*Handle).FastRead")
	loc := func(id uint64, f *profile.Function) *profile.Location {
		return &profile.Location{ID: id, Line: []profile.Line{{Function: f}}}
	}
	lSync, lBadger, lOurs, lCodec := loc(1, fSync), loc(2, fBadger), loc(3, fOurs), loc(4, fCodec)
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Sample: []*profile.Sample{
			{Location: []*profile.Location{lSync, lBadger, lOurs}, Value: []int64{3, 30}},
			{Location: []*profile.Location{lCodec, lOurs}, Value: []int64{1, 10}},
		},
		Function: []*profile.Function{fSync, fBadger, fOurs, fCodec},
		Location: []*profile.Location{lSync, lBadger, lOurs, lCodec},
	}
	sum, err := summarizeProfile(p, "cpu", 10)
	if err != nil {
		t.Fatal(err)
	}
	if sum.total != 40 {
		t.Errorf("total %d, want 40", sum.total)
	}
	if sum.flat[0].Name != "syscall.Fdatasync" || sum.flat[0].Share != 0.75 {
		t.Errorf("flat %+v", sum.flat)
	}
	if len(sum.cum) == 0 || sum.cum[0].Name != "github.com/chubbygo/chubby/replica.(*Local).run" || sum.cum[0].Share != 1 {
		t.Errorf("cum (ours) %+v", sum.cum)
	}
	if sum.cats[0].Name != "log sync (fsync/msync)" || sum.cats[0].Share != 0.75 {
		t.Errorf("categories %+v", sum.cats)
	}
	if _, err := summarizeProfile(p, "alloc_space", 10); err == nil {
		t.Error("a missing sample type must be an error")
	}
}
