package cell

import (
	"encoding/binary"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/cloudwego/gopkg/protocol/thrift"

	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/chubby/combineservice"
)

// rawCall sends one framed strict-binary CALL of method with the args
// struct body and returns the reply's message type and its body.
func rawCall(t *testing.T, addr, method string, body []byte) (thrift.TMessageType, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	msg := make([]byte, thrift.Binary.MessageBeginLength(method))
	thrift.Binary.WriteMessageBegin(msg, method, thrift.CALL, 1)
	msg = append(msg, body...)
	if _, err := c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(msg))), msg...)); err != nil {
		t.Fatal(err)
	}
	var n [4]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		t.Fatalf("%s: no reply: %v", method, err)
	}
	reply := make([]byte, binary.BigEndian.Uint32(n[:]))
	if _, err := io.ReadFull(c, reply); err != nil {
		t.Fatalf("%s: short reply: %v", method, err)
	}
	_, typ, _, l, err := thrift.Binary.ReadMessageBegin(reply)
	if err != nil {
		t.Fatalf("%s: reply header: %v", method, err)
	}
	return typ, reply[l:]
}

// TestEveryMethodWithoutRequest calls every method of every service with
// an args struct that has no request (what the IDL's optional request and
// a client that sends none give): each is served as the empty request or
// refused with INVALID_ARGUMENT, never a panic (which Kitex would answer
// with an EXCEPTION). GetMaster without a request panicked.
func TestEveryMethodWithoutRequest(t *testing.T) {
	tc := startCell(t, Config{InMemory: true})
	methods := make([]string, 0)
	for m := range combineservice.NewServiceInfo().Methods {
		methods = append(methods, m)
	}
	slices.Sort(methods)
	served := map[string]bool{"GetMaster": true, "GetStatus": true, "WhoAmI": true}
	for _, m := range methods {
		typ, body := rawCall(t, tc.s.Addr(), m, []byte{byte(thrift.STOP)})
		if typ != thrift.REPLY {
			t.Errorf("%s without a request: message type %d, want a REPLY (%d)", m, typ, thrift.REPLY)
			continue
		}
		_, id, l, err := thrift.Binary.ReadFieldBegin(body)
		if err != nil {
			t.Errorf("%s: result: %v", m, err)
			continue
		}
		switch {
		case id == 0 && served[m]:
		case id == 1 && !served[m]:
			ce := chubby.NewChubbyError()
			if _, err := ce.FastRead(body[l:]); err != nil || ce.Code != chubby.ErrorCode_INVALID_ARGUMENT {
				t.Errorf("%s without a request: %v (%v), want INVALID_ARGUMENT", m, ce, err)
			}
		default:
			t.Errorf("%s without a request: result field %d", m, id)
		}
	}
	if len(methods) < 20 {
		t.Fatalf("only %d methods: %v", len(methods), methods)
	}
	if _, err := tc.cli.GetMaster(ctx, &chubby.GetMasterRequest{}); err != nil {
		t.Fatalf("still serving: %v", err)
	}
}
