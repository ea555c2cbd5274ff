package client

import (
	"testing"

	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/gen/chubby"
)

// TestMultiOperation: a Multi applies all or nothing, and a caching reader of a
// file it writes does not read its old copy afterwards (the cell
// invalidates what the Multi touches before it commits).
func TestMultiOperation(t *testing.T) {
	cl := celltest.Start(t, celltest.Options{})
	ctx := testCtx(t)
	c := must[*Client](t, "connect")(Connect(ctx, Config{Addrs: []string{cl.Addr}}))
	defer c.Close()
	w := must[*Session](t, "writer")(c.NewSession(ctx))
	r := must[*Session](t, "reader")(c.NewSession(ctx))
	must[*chubby.Stat](t, "create")(w.CreateFile(ctx, "/m", []byte("v1"), CreateOptions{}))
	rh := must[*Handle](t, "open")(r.Open(ctx, "/m", OpenOptions{}))
	if b, _, err := rh.GetContentsAndStat(ctx); err != nil || string(b) != "v1" {
		t.Fatalf("read %q, %v", b, err)
	}
	res, err := w.Multi(ctx, []Cmp{CmpGeneration("/m", 1), CmpNotExists("/n")},
		[]Op{OpSetIf("/m", []byte("v2"), 1), OpCreate("/n", []byte("new"))})
	if err != nil || !res.Succeeded || len(res.Stats) != 2 || res.Stats[0].GetContentGeneration() != 2 {
		t.Fatalf("Multi = %+v, %v", res, err)
	}
	if b, _, err := rh.GetContentsAndStat(ctx); err != nil || string(b) != "v2" {
		t.Fatalf("the reader read %q, %v after the Multi wrote v2", b, err)
	}
	// A condition that no longer holds: an answer, nothing applied.
	res, err = w.Multi(ctx, []Cmp{CmpGeneration("/m", 1)}, []Op{OpSet("/m", []byte("v3"))})
	if err != nil || res.Succeeded || res.FailedCompare != 0 {
		t.Fatalf("stale Multi = %+v, %v", res, err)
	}
	// An op that cannot apply: an error, and the first op is not applied.
	_, err = w.Multi(ctx, nil, []Op{OpSet("/m", []byte("v4")), OpCreate("/n", nil)})
	if !IsCode(err, chubby.ErrorCode_EXISTS) {
		t.Fatalf("Multi creating an existing file: %v", err)
	}
	if b, _, err := rh.GetContentsAndStat(ctx); err != nil || string(b) != "v2" {
		t.Fatalf("after a refused Multi the file holds %q, %v", b, err)
	}
}
