package cell

import (
	"bytes"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/rpc"
)

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestUnknownMethodWithHugeName calls a method whose name is 1 MB, framed
// and buffered: the reply is small and does not echo the name, no log line
// carries it, and the cell still serves. Each such call got a 2 MiB reply
// and wrote a 4 MB log line.
func TestUnknownMethodWithHugeName(t *testing.T) {
	var logs syncBuffer
	tc := startCell(t, Config{InMemory: true, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	name := strings.Repeat("N", 1_000_000)
	msg := binary.BigEndian.AppendUint32(nil, 0x80010001) // strict binary, CALL
	msg = binary.BigEndian.AppendUint32(msg, uint32(len(name)))
	msg = append(msg, name...)
	msg = binary.BigEndian.AppendUint32(msg, 1)
	msg = append(msg, 0) // empty args
	for _, framed := range []bool{true, false} {
		c, err := net.Dial("tcp", tc.s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		p := msg
		if framed {
			p = append(binary.BigEndian.AppendUint32(nil, uint32(len(msg))), msg...)
		}
		go c.Write(p) // the server may close before reading it all
		reply, _ := io.ReadAll(io.LimitReader(c, 1<<22))
		c.Close()
		if len(reply) > 4096 || bytes.Contains(reply, []byte(strings.Repeat("N", 100))) {
			t.Errorf("framed=%v: a reply of %d bytes to a 1 MB method name (echoes it: %v)", framed, len(reply), bytes.Contains(reply, []byte(strings.Repeat("N", 100))))
		}
	}
	if _, err := tc.cli.GetMaster(ctx, &chubby.GetMasterRequest{}); err != nil {
		t.Fatalf("still serving: %v", err)
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if len(line) > 2*rpc.MaxLogMessageBytes {
			t.Errorf("a log line of %d bytes: %.120s...", len(line), line)
		}
	}
}
