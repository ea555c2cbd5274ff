package cell

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chubbygo/chubby/gen/chubby"
)

func ptr[T any](v T) *T { return &v }

// threeMembers is a master's status of a cell with a voter (the master,
// replica 1), a learner and a spare, some of whose values try to break out
// of the page.
func threeMembers() *chubby.CellStatus {
	return &chubby.CellStatus{
		Cell: `<script>alert("cell")</script>`, MasterId: "1", MasterAddress: "10.0.0.1:7000", Epoch: 4<<32 + 5,
		Sessions: 3, Nodes: 12, Handles: 4, LocksHeld: 2, CommittedOp: 991, UptimeMs: 93_500, Version: "v-test",
		ConfigEpoch: ptr[int64](4), PendingConfig: ptr[int64](0), TargetSize: ptr[int32](3),
		Decisions: []string{
			"2025-01-02T03:04:05Z bootstrap: a new cell of this replica alone",
			"2025-01-02T03:05:00Z autopilot: add replica 2 (<img src=x onerror=alert(1)>) as a learner",
		},
		Replicas: []*chubby.ReplicaStatus{
			{Id: "1", Address: "10.0.0.1:7000", Role: chubby.ReplicaRole_MASTER, CommittedOp: 991,
				Membership: ptr("voter"), GossipState: ptr("alive"), Behind: ptr[int64](0), LastContactMs: ptr[int64](0), PeerAddress: ptr("10.0.0.1:7001")},
			{Id: "2", Address: "10.0.0.2:7000", Role: chubby.ReplicaRole_REPLICA, CommittedOp: -1,
				Membership: ptr("learner"), GossipState: ptr(`suspect" onmouseover="alert(2)`), Behind: ptr[int64](40), LastContactMs: ptr[int64](-1),
				PeerAddress: ptr(`"><script>alert(3)</script>`)},
			{Id: "3", Address: "10.0.0.3:7000", Role: chubby.ReplicaRole_REPLICA, CommittedOp: -1,
				Membership: ptr("spare"), GossipState: ptr("alive"), PeerAddress: ptr("10.0.0.3:7001")},
		},
	}
}

func renderPage(t *testing.T, st *chubby.CellStatus, self string) string {
	t.Helper()
	var b strings.Builder
	if err := writeStatusPage(&b, st, self); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

var memberRow = regexp.MustCompile(`<tr class="member (\w+)">\s*<td>([^<\s]*)`)

// memberRows returns the members table's rows as "class:id".
func memberRows(page string) []string {
	var out []string
	for _, m := range memberRow.FindAllStringSubmatch(page, -1) {
		out = append(out, m[1]+":"+m[2])
	}
	return out
}

// TestStatusPageRender: the master's page of a three-member cell has the
// cell's figures, its configuration, a row per member styled by
// membership, the decisions newest first, and every value escaped.
func TestStatusPageRender(t *testing.T) {
	page := renderPage(t, threeMembers(), "1")
	if got, want := strings.Join(memberRows(page), " "), "voter:1 learner:2 spare:3"; got != want {
		t.Errorf("member rows %q, want %q", got, want)
	}
	for _, want := range []string{
		`<meta http-equiv="refresh" content="2">`,
		`&lt;script&gt;alert(&#34;cell&#34;)&lt;/script&gt;`, // the cell name, escaped
		`the master`, "10.0.0.1:7000", "10.0.0.1:7001",
		`<td class="num">17179869189 <span class="none">(configuration epoch 4, view 4)</span></td>`, `<td class="num">991</td>`, `<td class="num">12</td>`, "1m34s", "v-test",
		`<td class="num">4</td>`, "<td>none</td>", "3 voters", "1 voter, 1 learner; 1 spare",
		`<td class="num">40</td>`, "none since this master took over", "0 ms ago",
		`&#34;&gt;&lt;script&gt;alert(3)&lt;/script&gt;`, // a peer address, escaped
		`class="g-other"`, // a gossip state that is no known one gets no class of its own
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	for _, bad := range []string{"<script>alert", "<img", `" onmouseover`} {
		if strings.Contains(page, bad) {
			t.Errorf("page has unescaped %q", bad)
		}
	}
	newer, older := strings.Index(page, "autopilot: add replica 2"), strings.Index(page, "bootstrap: a new cell")
	if newer < 0 || older < 0 || newer > older {
		t.Errorf("decisions not newest first (at %d and %d)", newer, older)
	}
	if !strings.Contains(page, `<time datetime="2025-01-02T03:05:00Z">`) {
		t.Errorf("decision times not shown apart")
	}
}

// TestStatusPageSparse: pages without the master's progress, without
// gossip, without a configuration or without anything render, with dashes
// and notes for what is not known rather than zeros.
func TestStatusPageSparse(t *testing.T) {
	t.Run("non-master", func(t *testing.T) {
		st := threeMembers()
		st.Cell = "c"
		for _, r := range st.Replicas {
			r.Behind, r.LastContactMs = nil, nil
		}
		page := renderPage(t, st, "2")
		if got, want := strings.Join(memberRows(page), " "), "voter:1 learner:2 spare:3"; got != want {
			t.Errorf("member rows %q, want %q", got, want)
		}
		for _, want := range []string{"This is replica 2 (10.0.0.2:7000), REPLICA, not the master", "known only on the master (10.0.0.1:7000)"} {
			if !strings.Contains(page, want) {
				t.Errorf("page lacks %q", want)
			}
		}
	})
	t.Run("one replica without gossip", func(t *testing.T) {
		st := &chubby.CellStatus{Cell: "solo", MasterId: "1", MasterAddress: "127.0.0.1:1", Epoch: 1,
			ConfigEpoch: ptr[int64](1), PendingConfig: ptr[int64](0), TargetSize: ptr[int32](5),
			Replicas: []*chubby.ReplicaStatus{{Id: "1", Address: "127.0.0.1:1", Role: chubby.ReplicaRole_MASTER, CommittedOp: 5,
				Membership: ptr("voter"), Behind: ptr[int64](0), LastContactMs: ptr[int64](0)}}}
		page := renderPage(t, st, "1")
		if got := memberRows(page); len(got) != 1 || got[0] != "voter:1" {
			t.Errorf("member rows %q", got)
		}
		for _, want := range []string{"No gossip states", "None made by this replica", "1 voter, 0 learners"} {
			if !strings.Contains(page, want) {
				t.Errorf("page lacks %q", want)
			}
		}
	})
	t.Run("no configuration fields, no master", func(t *testing.T) {
		st := &chubby.CellStatus{Cell: "old", Replicas: []*chubby.ReplicaStatus{{Id: "1", Address: "a:1", Role: chubby.ReplicaRole_RECOVERING, CommittedOp: -1}}}
		page := renderPage(t, st, "1")
		if got := memberRows(page); len(got) != 1 || got[0] != "unknown:1" {
			t.Errorf("member rows %q", got)
		}
		for _, want := range []string{"No master known", "RECOVERING", `<span class="none">—</span>`} {
			if !strings.Contains(page, want) {
				t.Errorf("page lacks %q", want)
			}
		}
	})
	t.Run("pending change", func(t *testing.T) {
		st := threeMembers()
		st.PendingConfig = ptr[int64](1234)
		if page := renderPage(t, st, "1"); !strings.Contains(page, "voter change at log index 1234") {
			t.Errorf("pending change not shown")
		}
	})
	t.Run("nil", func(t *testing.T) {
		if page := renderPage(t, nil, ""); !strings.Contains(page, "No members known") {
			t.Errorf("empty page: %s", page)
		}
	})
}

// TestStatusAccept: HTML only when the Accept header prefers text/html
// to application/json.
func TestStatusAccept(t *testing.T) {
	for _, c := range []struct {
		accept string
		html   bool
	}{
		{"", false},
		{"*/*", false},
		{"application/json", false},
		{"text/plain", false},
		{"text/html", true},
		{"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", true}, // Firefox, Chrome
		{"text/html, application/json", false},                                    // a tie: JSON
		{"application/json;q=0.5, text/html", true},
		{"text/html;q=0.5, application/json", false},
		{"text/*", true},
		{"text/*;q=0.9, */*;q=0.1", true},
		{"text/html;q=0, */*", false},
		{"*/*;q=0.8, text/html;q=0.1", false}, // the most specific range counts
		{"TEXT/HTML", true},
		{"text/html;q=bogus", false},
	} {
		var values []string
		if c.accept != "" {
			values = []string{c.accept}
		}
		if got := prefersHTML(values); got != c.html {
			t.Errorf("Accept %q: html %v, want %v", c.accept, got, c.html)
		}
	}
}

// TestStatusNegotiation: a running cell's /status is JSON by default, for
// */* and for format=json; HTML for a browser's Accept and format=html.
func TestStatusNegotiation(t *testing.T) {
	tc := startCell(t, Config{InMemory: true, HTTPListen: "127.0.0.1:0"})
	tc.session("status")
	base := "http://" + tc.s.HTTPAddr() + "/status"
	get := func(url, accept string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest("GET", url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(body)
	}
	const browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
	for _, c := range []struct{ url, accept string }{{base, ""}, {base, "*/*"}, {base, "application/json"}, {base + "?format=json", browser}} {
		resp, body := get(c.url, c.accept)
		var st struct {
			Cell     string `json:"cell"`
			Replicas []struct {
				ID   string `json:"id"`
				Role string `json:"role"`
			} `json:"replicas"`
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s (Accept %q): Content-Type %q", c.url, c.accept, ct)
		}
		if err := json.Unmarshal([]byte(body), &st); err != nil || st.Cell != "local" || len(st.Replicas) != 1 {
			t.Errorf("%s (Accept %q): %v %q", c.url, c.accept, err, body)
		}
	}
	for _, c := range []struct{ url, accept string }{{base, browser}, {base + "?format=html", ""}, {base + "?format=HTML", "application/json"}} {
		resp, body := get(c.url, c.accept)
		if ct := resp.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
			t.Errorf("%s (Accept %q): Content-Type %q", c.url, c.accept, ct)
		}
		if !strings.Contains(body, "<q>local</q>") || !strings.Contains(body, "<table class=\"members\">") {
			t.Errorf("%s (Accept %q): not the page: %s", c.url, c.accept, body)
		}
		if got := memberRows(body); len(got) != 1 || got[0] != "voter:1" {
			t.Errorf("%s: member rows %q", c.url, got)
		}
		// A cell without TLS says so plainly, highlighted.
		if !strings.Contains(body, `<span class="pending">PLAINTEXT: no TLS on any port`) {
			t.Errorf("%s: the page does not warn of plaintext", c.url)
		}
	}
	if _, body := get(base, ""); !strings.Contains(body, `"security": "PLAINTEXT: no TLS on any port`) {
		t.Errorf("the JSON status does not say the cell is plaintext: %s", body)
	}
	if resp, _ := get(base+"?format=xml", ""); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("format=xml: %s", resp.Status)
	}
	if resp, _ := get(base, ""); !strings.Contains(resp.Header.Get("Vary"), "Accept") {
		t.Errorf("no Vary: Accept")
	}
}

// TestMetricsConfig: a running one-replica cell's /metrics has the
// configuration and, on the master, its member's progress.
func TestMetricsConfig(t *testing.T) {
	tc := startCell(t, Config{InMemory: true, HTTPListen: "127.0.0.1:0"})
	tc.session("metrics")
	want := map[string]string{ // "": any value
		"chubby_config_epoch":                             "",
		"chubby_config_change_pending":                    "0",
		"chubby_config_voters":                            "1",
		"chubby_config_learners":                          "0",
		`chubby_member_behind_entries{replica="1"}`:       "0",
		`chubby_member_last_contact_seconds{replica="1"}`: "0",
		"chubby_membership_decisions_total":               "0",
	}
	types := []string{
		"# TYPE chubby_config_epoch gauge", "# TYPE chubby_config_change_pending gauge",
		"# TYPE chubby_config_voters gauge", "# TYPE chubby_config_learners gauge",
		"# TYPE chubby_member_behind_entries gauge", "# TYPE chubby_member_last_contact_seconds gauge",
		"# TYPE chubby_membership_decisions_total counter",
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		body, samples := scrape(t, "http://"+tc.s.HTTPAddr()+"/metrics")
		var wrong []string
		for name, v := range want {
			if got, ok := samples[name]; !ok || (v != "" && got != v) {
				wrong = append(wrong, name+"="+got)
			}
		}
		for _, typ := range types {
			if !strings.Contains(body, typ+"\n") {
				wrong = append(wrong, typ)
			}
		}
		if len(wrong) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics missing or wrong: %v\n%s", wrong, body)
		}
		time.Sleep(20 * time.Millisecond) // until the replica serves as master
	}
}

// scrape returns the exposition and its samples' values by name{labels}.
func scrape(t *testing.T, url string) (string, map[string]string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	samples := map[string]string{}
	for _, line := range strings.Split(string(body), "\n") {
		if i := strings.LastIndex(line, " "); i > 0 && !strings.HasPrefix(line, "#") {
			samples[line[:i]] = line[i+1:]
		}
	}
	return string(body), samples
}

// TestMetricDecisionsCount: every membership decision counts once, also
// past the status page's window of recent ones.
func TestMetricDecisionsCount(t *testing.T) {
	tc := startCell(t, Config{InMemory: true, HTTPListen: "127.0.0.1:0"})
	for i := range maxDecisions + 10 {
		tc.s.decide(fmt.Sprintf("decision %d", i))
	}
	_, samples := scrape(t, "http://"+tc.s.HTTPAddr()+"/metrics")
	if got, want := samples["chubby_membership_decisions_total"], fmt.Sprint(maxDecisions+10); got != want {
		t.Fatalf("chubby_membership_decisions_total %s, want %s", got, want)
	}
	if n := len(tc.s.recentDecisions()); n != maxDecisions {
		t.Fatalf("%d recent decisions kept, want %d", n, maxDecisions)
	}
}
