package cell

import (
	"encoding/binary"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/chubbygo/chubby/gen/chubby"
)

// TestHostileBytes: a replica never crashes on what a client sends. Raw
// framed and unframed Thrift messages with garbage bodies (including the
// type bytes >= 0x80 that make gopkg's Skip panic) are thrown at the
// server; it must still answer well-formed calls afterwards.
//
// The server runs in a child process. netpoll sometimes closes the
// descriptor of a connection the hostile input broke twice ("netFD close
// error: bad file descriptor"); by the second close the number may belong
// to another connection of the same process. With client and server in
// one process the victim was the test client's own connection: once a
// failed call, once (CI, 2026-11-30) a fresh client that got no answer for
// seven minutes. Apart, the test sees what a real client of a real server
// would.
func TestHostileBytes(t *testing.T) {
	addr := startChildCell(t)
	call := func(method string, body []byte) []byte {
		var b []byte
		b = binary.BigEndian.AppendUint32(b, 0x80010001) // strict binary, CALL
		b = binary.BigEndian.AppendUint32(b, uint32(len(method)))
		b = append(b, method...)
		b = binary.BigEndian.AppendUint32(b, 1) // seq id
		return append(b, body...)
	}
	framed := func(msg []byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(msg))), msg...)
	}
	// Args{1: struct OpenRequest{99: <type 0x88> ...}}
	badType := []byte{12, 0, 1, 0x88, 0, 99, 1, 2, 3, 4, 0, 0}
	// A list claiming 2^31-1 elements.
	hugeList := []byte{12, 0, 1, 15, 0, 1, 12, 0x7f, 0xff, 0xff, 0xff, 0, 0}
	rng := rand.New(rand.NewPCG(1, 2))
	payloads := [][]byte{
		framed(call("Open", badType)),
		call("Open", badType),
		framed(call("KeepAlive", hugeList)),
		framed(call("NoSuchMethod", []byte{0})),
		framed(call("CreateSession", []byte{0x8f, 0x8f, 0x8f})),
		{0xff, 0xff, 0xff, 0xff, 1, 2, 3},
	}
	for i := 0; i < 50; i++ {
		body := make([]byte, rng.IntN(64))
		for j := range body {
			body[j] = byte(rng.Uint32())
		}
		for _, m := range []string{"Open", "KeepAlive", "SetContents", "Acquire", "CheckSequencer"} {
			payloads = append(payloads, framed(call(m, body)), call(m, body))
		}
	}
	for _, p := range payloads {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(200 * time.Millisecond))
		c.Write(p)
		buf := make([]byte, 512)
		c.Read(buf) // an exception reply or a closed connection; either is fine
		c.Close()
	}
	// Still serving, still correct: a fresh client opens a session and
	// creates a file.
	cli := newRawClient(t, addr)
	if _, err := cli.GetMaster(ctx, nil); err != nil {
		t.Fatalf("server no longer answers after hostile input: %v", err)
	}
	r, err := cli.CreateSession(ctx, &chubby.CreateSessionRequest{ClientName: "after"})
	if err != nil {
		t.Fatalf("create session after hostile input: %v", err)
	}
	if _, err := cli.Open(ctx, &chubby.OpenRequest{Session: r.Session, Path: "/still-fine",
		Mode: chubby.OpenMode_READ_WRITE, Create: chubby.CreateMode_OPEN_OR_CREATE}); err != nil {
		t.Fatalf("open after hostile input: %v", err)
	}
}
