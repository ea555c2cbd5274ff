package cell

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// TestHTTPStatus: the /status page is the cell status as JSON with each
// replica's role by name.
func TestHTTPStatus(t *testing.T) {
	tc := startCell(t, Config{InMemory: true, HTTPListen: "127.0.0.1:0"})
	tc.session("status") // the cell answers: it is the master
	deadline := time.Now().Add(10 * time.Second)
	for {
		var st struct {
			Cell     string `json:"cell"`
			Epoch    int64  `json:"epoch"`
			Replicas []struct {
				ID   string `json:"id"`
				Role any    `json:"role"`
			} `json:"replicas"`
		}
		resp, err := http.Get("http://" + tc.s.HTTPAddr() + "/status")
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Replicas) != 1 || st.Cell != "local" {
			t.Fatalf("status %+v", st)
		}
		if role := st.Replicas[0].Role; role == "MASTER" && st.Epoch > 0 {
			return
		} else if _, isName := role.(string); !isName || time.Now().After(deadline) {
			t.Fatalf("replica %s role %#v (want \"MASTER\"), epoch %d", st.Replicas[0].ID, role, st.Epoch)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
