package rpc

import (
	"sync"
	"testing"
	"time"

	"github.com/cloudwego/kitex/server"
)

// startsLate behaves as Kitex's server does (v0.16.1) with the moment of
// danger stretched: Run takes a while before it builds what Stop stops, a
// Stop before then does nothing, and Run then serves until a Stop that can
// never come. The real server's window is microseconds wide, too narrow
// for a test to hit reliably; TestStopAtAnyMomentFreesThePort runs the
// real one.
type startsLate struct {
	server.Server // nil: only Run and Stop are called
	lc            *lifecycle
	delay         time.Duration

	mu      sync.Mutex
	built   bool
	stopped bool          // a Stop came (Kitex: s.stopped.Do)
	quit    chan struct{} // closed by a Stop that found the server built
}

func (s *startsLate) Run() error {
	time.Sleep(s.delay)
	s.mu.Lock()
	s.built = true
	s.mu.Unlock()
	s.lc.boot() // the transport is handed the listener
	<-s.quit
	return nil
}

func (s *startsLate) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil
	}
	s.stopped = true
	if s.built {
		close(s.quit)
	}
	return nil
}

// A Stop while Run starts waits until Run has built what Stop stops.
func TestStopWaitsForRunToBuild(t *testing.T) {
	lc := newLifecycle()
	inner := &startsLate{lc: lc, delay: 50 * time.Millisecond, quit: make(chan struct{})}
	s := &Server{Server: inner, lc: lc}
	ran := make(chan error, 1)
	go func() { ran <- s.Run() }()
	for { // until Run has begun
		s.mu.Lock()
		running := s.running
		s.mu.Unlock()
		if running {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("Run still serving 10 s after Stop returned: Stop came before Run built the server and was lost")
	}
}
