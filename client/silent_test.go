package client

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"
)

// silentListener accepts connections and never answers on them: a
// replica whose process is stopped (SIGSTOP) or cut off looks like this
// to a client, its kernel completing handshakes that nothing serves.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestTimeoutMovesTheMasterGuess: a call to a master that does not answer
// (paused, cut off) times out — and the client's next call asks another
// replica instead of the same silent one again. Before, only calls that
// carry a request number moved the guess; a session's reads and
// unnumbered writes went on timing out against a stopped master until its
// KeepAlive gave up, a lease later.
func TestTimeoutMovesTheMasterGuess(t *testing.T) {
	real := startCell(t)
	silent := silentListener(t)
	c := connectCfg(t, Config{Addrs: []string{silent, real}, CallTimeout: 300 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c.locator.learned(silent) // the guess names the silent replica
	if _, err := c.Status(ctx); err == nil {
		t.Fatal("a call to the silent replica succeeded")
	}
	if _, err := c.Status(ctx); err != nil {
		t.Fatalf("the next call went to the silent replica again: %v", err)
	}
}
