package cell_test

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/client"
	"github.com/chubbygo/chubby/rpc/tlsconf/tlstest"
)

// rpcMethods are every method the client port serves.
var rpcMethods = []string{
	"CreateSession", "KeepAlive", "CloseSession",
	"Open", "Close", "GetContentsAndStat", "GetStat", "ReadDir", "SetContents", "Delete", "Mkdir", "CreateFile", "SetACL", "Multi",
	"Acquire", "TryAcquire", "Release", "GetSequencer", "CheckSequencer",
	"GetMaster", "GetStatus", "RemoveMember", "WhoAmI", "GetTimestamps",
}

// FuzzRPCOverTLS sends every method of the client port arbitrary bodies,
// framed or not, over an authenticated TLS connection to a TLS cell (the
// gonet transport, which decodes on its own path): the cell must answer a
// well-formed call after each. In the default suite it runs the seeds
// (each method with garbage, an empty struct and a list claiming 2^31-1
// elements); go test -fuzz FuzzRPCOverTLS ./cell explores further.
func FuzzRPCOverTLS(f *testing.F) {
	p := tlstest.NewPKI(f, "cell")
	cl := celltest.Start(f, celltest.Options{TLS: p.Reloader(f, "replica-1", tlstest.Both, nil)})
	cliTLS := p.ClientTLS(f, "alice")
	c, err := client.Connect(context.Background(), client.Config{Addrs: []string{cl.Addr}, TLS: cliTLS, CallTimeout: 5 * time.Second})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { c.Close() })

	for i := range rpcMethods {
		for _, body := range [][]byte{
			{0},              // an empty args struct
			{12, 0, 1, 0, 0}, // args{1: empty struct}
			{12, 0, 1, 15, 0, 1, 12, 0x7f, 0xff, 0xff, 0xff, 0, 0}, // a huge list
			{12, 0, 1, 0x88, 0, 99, 1, 2, 3, 4, 0, 0},              // a bad type byte
			{0x8f, 0x8f, 0x8f},
		} {
			f.Add(uint8(i), body, true)
			f.Add(uint8(i), body, false)
		}
	}
	f.Fuzz(func(t *testing.T, m uint8, body []byte, framed bool) {
		msg := binary.BigEndian.AppendUint32(nil, 0x80010001) // strict binary, CALL
		name := rpcMethods[int(m)%len(rpcMethods)]
		msg = binary.BigEndian.AppendUint32(msg, uint32(len(name)))
		msg = append(msg, name...)
		msg = binary.BigEndian.AppendUint32(msg, 1)
		msg = append(msg, body...)
		if framed {
			msg = append(binary.BigEndian.AppendUint32(nil, uint32(len(msg))), msg...)
		}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", cl.Addr, cliTLS)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		conn.SetDeadline(time.Now().Add(200 * time.Millisecond))
		conn.Write(msg)
		conn.Read(make([]byte, 512)) // a reply, an exception or a close: any is fine
		conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := c.WhoAmI(ctx); err != nil {
			t.Fatalf("the cell stopped answering after %s with %x: %v", name, body, err)
		}
	})
}
