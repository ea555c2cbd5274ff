package master

import (
	"slices"
	"strings"
	"testing"

	"github.com/chubbygo/chubby/gen/chubby"
)

// TestParseKeepAlive is the table of what a KeepAlive may carry.
func TestParseKeepAlive(t *testing.T) {
	item := func(id chubby.SessionID, acked int64) *chubby.KeepAliveItem {
		return &chubby.KeepAliveItem{Session: id, AckedEvent: &acked}
	}
	epoch := func(e int64) *int64 { return &e }
	many := make([]*chubby.KeepAliveItem, chubby.MAX_SESSIONS_PER_KEEPALIVE+1)
	for i := range many {
		many[i] = item(chubby.SessionID(i+1), 0)
	}
	for _, tc := range []struct {
		name string
		req  *chubby.KeepAliveRequest
		code chubby.ErrorCode // 0: taken in
		says string
	}{
		{"no body", nil, chubby.ErrorCode_INVALID_ARGUMENT, "no body"},
		{"older epoch", &chubby.KeepAliveRequest{Sessions: many[:1], Epoch: epoch(4)}, chubby.ErrorCode_STALE_EPOCH, "epoch 4 is over"},
		{"no sessions", &chubby.KeepAliveRequest{}, chubby.ErrorCode_INVALID_ARGUMENT, "not 0"},
		{"too many", &chubby.KeepAliveRequest{Sessions: many}, chubby.ErrorCode_INVALID_ARGUMENT, "sessions, not"},
		{"absent item", &chubby.KeepAliveRequest{Sessions: []*chubby.KeepAliveItem{nil}}, chubby.ErrorCode_INVALID_ARGUMENT, "no session item"},
		{"twice", &chubby.KeepAliveRequest{Sessions: []*chubby.KeepAliveItem{item(3, 0), item(3, 1)}}, chubby.ErrorCode_INVALID_ARGUMENT, "twice"},
		{"negative ack", &chubby.KeepAliveRequest{Sessions: []*chubby.KeepAliveItem{item(3, -1)}}, chubby.ErrorCode_INVALID_ARGUMENT, "negative"},
		{"this epoch", &chubby.KeepAliveRequest{Sessions: []*chubby.KeepAliveItem{item(3, 7), item(4, 0)}, Epoch: epoch(5)}, 0, ""},
		{"no epoch named", &chubby.KeepAliveRequest{Sessions: []*chubby.KeepAliveItem{item(3, 7), item(4, 0)}}, 0, ""},
	} {
		ka, err := ParseKeepAlive(tc.req, 5)
		switch {
		case tc.code == 0 && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.code == 0 && (!slices.Equal(ka.IDs, []chubby.SessionID{3, 4}) || !slices.Equal(ka.Acks, []int64{7, 0})):
			t.Errorf("%s: took in %+v", tc.name, ka)
		case tc.code != 0 && (err == nil || err.Code != tc.code || !strings.Contains(err.Message, tc.says)):
			t.Errorf("%s: %v, want %v saying %q", tc.name, err, tc.code, tc.says)
		case tc.code == chubby.ErrorCode_STALE_EPOCH && err.GetEpoch() != 5:
			t.Errorf("%s: names epoch %d, want 5", tc.name, err.GetEpoch())
		}
	}
}
