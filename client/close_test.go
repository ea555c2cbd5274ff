package client

import (
	"os"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell/celltest"
)

// openFiles counts this process's open descriptors.
func openFiles(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd here")
	}
	return len(es)
}

// TestCloseReleasesConnections: a program that makes clients and closes
// them does not pile up connections (each used to stay open until it idled
// out, 30 s later, and a loop of new clients filled the cell's connection
// limit). Both ends are in this process, so both are counted.
func TestCloseReleasesConnections(t *testing.T) {
	p := newTestPKI(t)
	plain := celltest.Start(t, celltest.Options{})
	secure := p.startTLSCell(t, "")
	tc := p.clientTLS(t, "closer")
	for _, m := range []struct {
		name string
		cfg  Config
	}{{"plaintext", Config{Addrs: []string{plain.Addr}}}, {"tls", Config{Addrs: []string{secure.Addr}, TLS: tc}}} {
		t.Run(m.name, func(t *testing.T) {
			ctx := testCtx(t)
			before := openFiles(t)
			for range 100 {
				c := must[*Client](t, "connect")(Connect(ctx, m.cfg))
				s := must[*Session](t, "session")(c.NewSession(ctx))
				if err := s.Close(ctx); err != nil {
					t.Fatal(err)
				}
				c.Close()
			}
			var now int
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				if now = openFiles(t); now <= before+10 {
					return
				}
			}
			t.Fatalf("%d descriptors open before 100 clients came and went, %d after", before, now)
		})
	}
}
