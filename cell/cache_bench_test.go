package cell

import (
	"fmt"
	"sync"
	"testing"

	chubbyclient "github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/gen/chubby"
)

// Cache benchmarks through the Go client and real Kitex on loopback:
//
//	go test ./cell -run '^$' -bench 'BenchmarkCache' -benchtime 2000x
//
// BenchmarkCacheRead compares a read served by the session cache with one
// that goes to the cell. BenchmarkCacheWrite measures a write of a file
// that n other sessions cache: before it commits, each of them is sent an
// invalidation on its KeepAlive and must acknowledge it (their re-reads,
// which register them again, are not timed).

func benchClient(b *testing.B, addr string, cfg chubbyclient.Config) *chubbyclient.Client {
	cfg.Addrs, cfg.Logger = []string{addr}, quietLogger()
	c, err := chubbyclient.Connect(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

func BenchmarkCacheRead(b *testing.B) {
	for _, tt := range []struct {
		name string
		cfg  chubbyclient.Config
	}{
		{"cached", chubbyclient.Config{}},
		{"uncached", chubbyclient.Config{DisableCache: true}},
	} {
		b.Run(tt.name, func(b *testing.B) {
			tc := startCell(b, Config{InMemory: true})
			c := benchClient(b, tc.s.Addr(), tt.cfg)
			s, err := c.NewSession(ctx)
			if err != nil {
				b.Fatal(err)
			}
			h, err := s.Open(ctx, "/f", chubbyclient.OpenOptions{Mode: chubby.OpenMode_READ_WRITE,
				Create: chubby.CreateMode_OPEN_OR_CREATE, InitialContent: []byte("10.0.0.7:8080")})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				if _, _, err := h.GetContentsAndStat(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			st := s.CacheStats()
			b.ReportMetric(st.HitRate(), "hit-rate")
		})
	}
}

func BenchmarkCacheWrite(b *testing.B) {
	for _, n := range []int{0, 1, 100, 1000} {
		b.Run(fmt.Sprintf("cachers=%d", n), func(b *testing.B) {
			tc := startCell(b, Config{InMemory: true})
			c := benchClient(b, tc.s.Addr(), chubbyclient.Config{})
			w, err := c.NewSession(ctx)
			if err != nil {
				b.Fatal(err)
			}
			opts := chubbyclient.OpenOptions{Mode: chubby.OpenMode_READ_WRITE, Create: chubby.CreateMode_OPEN_OR_CREATE}
			hw, err := w.Open(ctx, "/f", opts)
			if err != nil {
				b.Fatal(err)
			}
			hs := make([]*chubbyclient.Handle, n)
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s, err := c.NewSession(ctx)
					if err != nil {
						errs <- err
						return
					}
					if hs[i], err = s.Open(ctx, "/f", chubbyclient.OpenOptions{}); err != nil {
						errs <- err
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
			reread := func() {
				sem := make(chan struct{}, 64)
				for _, h := range hs {
					wg.Add(1)
					sem <- struct{}{}
					go func() {
						defer wg.Done()
						defer func() { <-sem }()
						if _, _, err := h.GetContentsAndStat(ctx); err != nil {
							b.Error(err)
						}
					}()
				}
				wg.Wait()
			}
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				reread() // every cacher holds /f again
				b.StartTimer()
				if _, err := hw.SetContents(ctx, []byte(fmt.Sprint(i))); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
