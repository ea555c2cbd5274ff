package cell

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
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

// TestHealthzSaysWhatIsMissing: /healthz says 200 "ok" for a working
// member (the master of a one-replica cell) and 503 with the reason for a
// replica that no configuration names yet (a spare whose cell has not
// added it: before, it said 200); / leads to the status page.
func TestHealthzSaysWhatIsMissing(t *testing.T) {
	get := func(url string) (int, string) {
		t.Helper()
		c := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusFound {
			return resp.StatusCode, resp.Header.Get("Location")
		}
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	tc := startCell(t, Config{InMemory: true, HTTPListen: "127.0.0.1:0"})
	tc.session("health")
	base := "http://" + tc.s.HTTPAddr()
	if code, body := get(base + "/healthz"); code != http.StatusOK || body != "ok" {
		t.Errorf("/healthz of a serving master: %d %q", code, body)
	}
	if code, loc := get(base + "/"); code != http.StatusFound || loc != "/status" {
		t.Errorf("/: %d %q, want a redirect to /status", code, loc)
	}
	if code, _ := get(base + "/nothing"); code != http.StatusNotFound {
		t.Errorf("/nothing: %d, want 404", code)
	}

	// A spare told to join a cell that is not there: it waits.
	ln, pl := loopbackPair(t)
	s, err := New(Config{Cell: "health-test", Listener: ln, PeerListener: pl, GossipListen: "127.0.0.1:0",
		Join: []string{"127.0.0.1:1"}, HTTPListen: "127.0.0.1:0", DataDir: t.TempDir(), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background()) }()
	t.Cleanup(func() { s.Stop(); <-done })
	code, body := get("http://" + s.HTTPAddr() + "/healthz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "waiting to join") {
		t.Errorf("/healthz of a replica waiting to join: %d %q, want 503 waiting to join", code, body)
	}
}

// TestOneReplicaCellHasNoPeerAddress: a one-replica cell has no peer port,
// and its status says none (it said 127.0.0.1:0).
func TestOneReplicaCellHasNoPeerAddress(t *testing.T) {
	tc := startCell(t, Config{InMemory: true})
	tc.session("peer")
	st := tc.s.status()
	if len(st.Replicas) != 1 {
		t.Fatalf("replicas %+v", st.Replicas)
	}
	if pa := st.Replicas[0].PeerAddress; pa != nil {
		t.Errorf("peer address %q, want none", *pa)
	}
	if ms := tc.s.log.Info().Members; len(ms) != 1 || ms[0].PeerAddr != "" {
		t.Errorf("configuration %+v, want one member without a peer address", ms)
	}
}
