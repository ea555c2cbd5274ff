package rpc

import (
	"fmt"
	"net"
	"os"
	"testing"
	"time"
)

// TestPollListenerKeepsNumberUntilRelease checks the descriptor life cycle
// that netpoll relies on: after Close the port refuses connections but the
// descriptor number stays taken (by /dev/null) however often Close is
// called, and only release frees it.
func TestPollListenerKeepsNumberUntilRelease(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pl, err := newPollListener(ln)
	if err != nil {
		t.Fatal(err)
	}
	fdPath := fmt.Sprintf("/proc/self/fd/%d", pl.Fd())
	if target, err := os.Readlink(fdPath); err != nil || len(target) < 7 || target[:7] != "socket:" {
		t.Fatalf("before Close, fd %d is %q (%v); want a socket", pl.Fd(), target, err)
	}

	c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var accepted net.Conn
	for deadline := time.Now().Add(5 * time.Second); accepted == nil; time.Sleep(time.Millisecond) {
		if accepted, err = pl.Accept(); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("no connection accepted within 5 s")
		}
	}
	ac := accepted.(*acceptedConn)
	if ra := ac.RemoteAddr().String(); ra != c.LocalAddr().String() {
		t.Errorf("accepted connection's remote address %s; the dialer is %s", ra, c.LocalAddr())
	}
	if _, err := accepted.Read(make([]byte, 1)); err != errHandedOver {
		t.Errorf("Read on an accepted connection = %v; want %v", err, errHandedOver)
	}
	os.NewFile(uintptr(ac.Fd()), "accepted").Close()

	for range 3 {
		if err := pl.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	if target, err := os.Readlink(fdPath); err != nil || target != os.DevNull {
		t.Fatalf("after Close, fd %d is %q (%v); want %s", pl.Fd(), target, err, os.DevNull)
	}
	if _, err := pl.Accept(); err != net.ErrClosed {
		t.Errorf("Accept after Close = %v; want net.ErrClosed", err)
	}
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Errorf("the port still accepts connections after Close")
	}

	pl.release()
	pl.release()
	if _, err := os.Readlink(fdPath); !os.IsNotExist(err) {
		t.Errorf("after release, fd %d: %v; want it closed", pl.Fd(), err)
	}
}
