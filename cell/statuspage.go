package cell

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/chubbygo/chubby/cell/master"
	"github.com/chubbygo/chubby/gen/chubby"
)

// The /status page: the cell status as JSON for scripts (what it always
// was) or as HTML for people, chosen by the request.
//
//   - ?format=json or ?format=html forces either.
//   - Otherwise the Accept header decides: HTML only when it prefers
//     text/html to application/json (a browser's "text/html,...,*/*;q=0.8"
//     does); on a tie ("*/*", as curl sends), with no Accept header, or
//     when it names neither, JSON.

// statusFormat is the format a /status request asks for: "json" or
// "html"; or "" after answering 400 to a format= that is neither. It adds
// Vary: Accept, the answer depending on it.
func statusFormat(w http.ResponseWriter, r *http.Request) string {
	w.Header().Add("Vary", "Accept")
	if f := r.URL.Query().Get("format"); f != "" {
		switch f = strings.ToLower(f); f {
		case "json", "html":
			return f
		}
		http.Error(w, fmt.Sprintf("format %q: json or html", f), http.StatusBadRequest)
		return ""
	}
	if prefersHTML(r.Header.Values("Accept")) {
		return "html"
	}
	return "json"
}

// prefersHTML reports whether the Accept header values give text/html a
// higher quality than application/json. Each type's quality is that of
// the most specific media range matching it (RFC 9110 §12.5.1).
func prefersHTML(accept []string) bool {
	html, json := acceptQuality(accept, "text", "html"), acceptQuality(accept, "application", "json")
	return html > 0 && html > json
}

// acceptQuality is the quality the Accept header gives typ/sub: 0 when no
// range matches (or the header is absent).
func acceptQuality(accept []string, typ, sub string) float64 {
	q, spec := 0.0, -1
	for _, v := range accept {
		for _, part := range strings.Split(v, ",") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			mt, params, err := mime.ParseMediaType(part)
			if err != nil {
				continue
			}
			t, s, _ := strings.Cut(mt, "/")
			var sp int
			switch {
			case t == typ && s == sub:
				sp = 2
			case t == typ && s == "*":
				sp = 1
			case t == "*" && s == "*":
				sp = 0
			default:
				continue
			}
			if sp < spec {
				continue
			}
			pq := 1.0
			if qs, ok := params["q"]; ok {
				f, err := strconv.ParseFloat(qs, 64)
				if err != nil || f < 0 || f > 1 {
					continue
				}
				pq = f
			}
			if sp > spec {
				spec, q = sp, pq
			} else {
				q = max(q, pq)
			}
		}
	}
	return q
}

// serveStatusPage answers /status with the HTML page of st, as replica
// self sees it.
func serveStatusPage(w http.ResponseWriter, st *chubby.CellStatus, self uint64) {
	var buf bytes.Buffer
	if err := writeStatusPage(&buf, st, strconv.FormatUint(self, 10)); err != nil {
		http.Error(w, "status page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(buf.Bytes())
}

// writeStatusPage renders the HTML status page of st as replica self
// sees it ("" if unknown). Every value from st is escaped.
func writeStatusPage(w io.Writer, st *chubby.CellStatus, self string) error {
	if st == nil {
		st = &chubby.CellStatus{}
	}
	return statusPage.Execute(w, newPageView(st, self))
}

// pageView is what the status page template shows.
type pageView struct {
	Cell          string
	Self          string // this replica's id, "" if unknown
	SelfAddress   string
	SelfRole      string // MASTER, REPLICA, RECOVERING, or "" if not listed
	SelfIsMaster  bool
	MasterID      string
	MasterAddress string
	Epoch         int64
	EpochParts    string // "configuration epoch E, view V": what Epoch packs; "" if none
	CommittedOp   int64
	Sessions      int64
	Nodes         int64
	Handles       int64
	LocksHeld     int64
	Uptime        string
	Version       string
	Security      string
	Plaintext     bool // Security says the cell runs without TLS

	ConfigEpoch string // "" when absent
	Pending     string // "none", "index N", or "" when absent
	TargetSize  string // "" when absent
	Voters      int
	Learners    int
	Spares      int

	Members   []memberView
	Decisions []decisionView // newest first
	// ShowProgress: some member has behind or last contact (the master's
	// view); off the master those columns say so instead of dashes.
	ShowProgress bool
	ShowGossip   bool
}

type memberView struct {
	ID          string
	Address     string
	PeerAddress string
	Membership  string // as status gives it, "" when absent
	Class       string // voter, learner, spare or unknown: the row's style
	Role        string
	Gossip      string
	GossipClass string // alive, suspect, dead, left or other
	Behind      string
	LastContact string
	Self        bool
	Master      bool
	CommittedOp string
}

type decisionView struct {
	Time    string
	Message string
}

func newPageView(st *chubby.CellStatus, self string) pageView {
	v := pageView{
		Cell: st.Cell, Self: self, MasterID: st.MasterId, MasterAddress: st.MasterAddress,
		Epoch: int64(st.Epoch), CommittedOp: st.CommittedOp, Sessions: st.Sessions, Nodes: st.Nodes,
		Handles: st.Handles, LocksHeld: st.LocksHeld, Version: st.Version,
		Security: st.GetSecurity(), Plaintext: strings.HasPrefix(st.GetSecurity(), "PLAINTEXT"),
		Uptime: (time.Duration(st.UptimeMs) * time.Millisecond).Round(time.Second).String(),
	}
	if ce, view, ok := master.EpochParts(st.Epoch); ok {
		v.EpochParts = fmt.Sprintf("configuration epoch %d, view %d", ce, view)
	}
	if st.ConfigEpoch != nil {
		v.ConfigEpoch = strconv.FormatInt(*st.ConfigEpoch, 10)
	}
	if st.PendingConfig != nil {
		v.Pending = "none"
		if *st.PendingConfig != 0 {
			v.Pending = "voter change at log index " + strconv.FormatInt(*st.PendingConfig, 10) + ", not yet committed"
		}
	}
	if st.TargetSize != nil {
		v.TargetSize = strconv.FormatInt(int64(*st.TargetSize), 10)
	}
	for _, r := range st.Replicas {
		if r == nil {
			continue
		}
		m := memberView{ID: r.Id, Address: r.Address, Role: r.Role.String(), Self: self != "" && r.Id == self,
			Master: r.Role == chubby.ReplicaRole_MASTER}
		m.PeerAddress, m.Membership, m.Gossip = deref(r.PeerAddress), deref(r.Membership), deref(r.GossipState)
		switch m.GossipClass = "other"; m.Gossip {
		case "alive", "suspect", "dead", "left":
			m.GossipClass = m.Gossip
		}
		switch m.Membership {
		case "voter":
			v.Voters++
			m.Class = "voter"
		case "learner":
			v.Learners++
			m.Class = "learner"
		case "spare":
			v.Spares++
			m.Class = "spare"
			m.Role = "" // not in the configuration: no role in it
		default:
			m.Class = "unknown"
		}
		if r.Behind != nil {
			m.Behind = strconv.FormatInt(*r.Behind, 10)
			v.ShowProgress = true
		}
		if r.LastContactMs != nil {
			m.LastContact = contactString(*r.LastContactMs)
			v.ShowProgress = true
		}
		if r.GossipState != nil {
			v.ShowGossip = true
		}
		if r.CommittedOp >= 0 {
			m.CommittedOp = strconv.FormatInt(r.CommittedOp, 10)
		}
		if m.Self {
			v.SelfAddress, v.SelfRole, v.SelfIsMaster = r.Address, r.Role.String(), m.Master
		}
		v.Members = append(v.Members, m)
	}
	for _, d := range slices.Backward(st.Decisions) {
		t, msg, ok := strings.Cut(d, " ")
		if _, err := time.Parse(time.RFC3339, t); !ok || err != nil {
			t, msg = "", d
		}
		v.Decisions = append(v.Decisions, decisionView{Time: t, Message: msg})
	}
	return v
}

// contactString shows a last contact in ms (-1: none since this master
// took over).
func contactString(ms int64) string {
	switch {
	case ms < 0:
		return "none since this master took over"
	case ms < 1000:
		return strconv.FormatInt(ms, 10) + " ms ago"
	}
	return (time.Duration(ms) * time.Millisecond).Round(100*time.Millisecond).String() + " ago"
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

var statusPage = template.Must(template.New("status").Parse(statusPageHTML))

// statusPageHTML is the page: self-contained (inline CSS, no scripts, no
// other requests), refreshed every 2 s.
const statusPageHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="2">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>chubby {{.Cell}}{{with .Self}} — replica {{.}}{{end}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
h1{font-size:1.5em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em}
.sub{color:#555;margin:0 0 1em}
table{border-collapse:collapse;background:#fff}
th,td{border:1px solid #ddd;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#eee;font-weight:600}
table.kv th{width:11em}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;padding:0 .5em;border-radius:.7em;font-size:.85em;font-weight:600}
tr.voter td:first-child{border-left:4px solid #2a7}
tr.learner td:first-child{border-left:4px solid #d90}
tr.spare td:first-child{border-left:4px solid #999}
tr.spare{color:#666;background:#f4f4f4}
.voter .badge.m{background:#dfd;color:#063}
.learner .badge.m{background:#fed;color:#840}
.spare .badge.m{background:#e6e6e6;color:#444}
.unknown .badge.m{background:#eee;color:#444}
.badge.master{background:#225;color:#fff}
.badge.self{background:#cde;color:#123}
.g-alive{color:#063}.g-suspect{color:#a60}.g-dead,.g-left{color:#b00}
.none{color:#999}
.pending{color:#a60;font-weight:600}
ol.dec{padding-left:1.5em;margin:0}ol.dec li{margin:.15em 0}
ol.dec time{font-family:ui-monospace,monospace;color:#555;margin-right:.6em}
footer{margin-top:2em;color:#777;font-size:.9em}
</style>
</head>
<body>
<h1>Chubby cell <q>{{.Cell}}</q></h1>
<p class="sub">{{if .Self}}This is replica {{.Self}}{{with .SelfAddress}} ({{.}}){{end}}, {{if .SelfIsMaster}}<span class="badge master">the master</span>{{else if .SelfRole}}{{.SelfRole}}, not the master{{else}}not in the configuration{{end}}.{{end}}
{{if .MasterID}}Master: replica {{.MasterID}} at {{.MasterAddress}}.{{else}}<span class="pending">No master known (a view change may be under way).</span>{{end}}</p>

<h2>Cell</h2>
<table class="kv">
<tr><th>Master</th><td>{{if .MasterID}}{{.MasterID}} ({{.MasterAddress}}){{else}}<span class="none">unknown</span>{{end}}</td></tr>
<tr><th>Master epoch</th><td class="num">{{.Epoch}}{{if .EpochParts}} <span class="none">({{.EpochParts}})</span>{{end}}</td></tr>
<tr><th>Committed op</th><td class="num">{{.CommittedOp}}</td></tr>
<tr><th>Sessions</th><td class="num">{{.Sessions}}</td></tr>
<tr><th>Nodes</th><td class="num">{{.Nodes}}</td></tr>
<tr><th>Handles</th><td class="num">{{.Handles}}</td></tr>
<tr><th>Locks held</th><td class="num">{{.LocksHeld}}</td></tr>
<tr><th>Uptime</th><td>{{.Uptime}}</td></tr>
<tr><th>Version</th><td>{{.Version}}</td></tr>
<tr><th>Security</th><td>{{if .Plaintext}}<span class="pending">{{.Security}}</span>{{else}}{{or .Security "—"}}{{end}}</td></tr>
</table>

<h2>Configuration</h2>
<table class="kv">
<tr><th>Config epoch</th><td class="num">{{if .ConfigEpoch}}{{.ConfigEpoch}}{{else}}<span class="none">—</span>{{end}}</td></tr>
<tr><th>Pending change</th><td>{{if eq .Pending "none"}}none{{else if .Pending}}<span class="pending">{{.Pending}}</span>{{else}}<span class="none">—</span>{{end}}</td></tr>
<tr><th>Target size</th><td class="num">{{if .TargetSize}}{{.TargetSize}} voters{{else}}<span class="none">—</span>{{end}}</td></tr>
<tr><th>Members</th><td>{{.Voters}} voter{{if ne .Voters 1}}s{{end}}, {{.Learners}} learner{{if ne .Learners 1}}s{{end}}{{if .Spares}}; {{.Spares}} spare{{if ne .Spares 1}}s{{end}} outside the configuration{{end}}</td></tr>
</table>

<h2>Members</h2>
{{if .Members}}<table class="members">
<thead><tr><th>ID</th><th>Client address</th><th>Peer address</th><th>Membership</th><th>Role</th><th>Gossip</th><th>Committed op</th><th>Behind</th><th>Last contact</th></tr></thead>
<tbody>
{{range .Members}}<tr class="member {{.Class}}">
<td>{{.ID}}{{if .Self}} <span class="badge self">this</span>{{end}}</td>
<td>{{or .Address "—"}}</td>
<td>{{if .PeerAddress}}{{.PeerAddress}}{{else}}<span class="none">—</span>{{end}}</td>
<td>{{if .Membership}}<span class="badge m">{{.Membership}}</span>{{else}}<span class="none">—</span>{{end}}</td>
<td>{{if .Master}}<span class="badge master">MASTER</span>{{else if .Role}}{{.Role}}{{else}}<span class="none">—</span>{{end}}</td>
<td>{{if .Gossip}}<span class="g-{{.GossipClass}}">{{.Gossip}}</span>{{else}}<span class="none">—</span>{{end}}</td>
<td class="num">{{if .CommittedOp}}{{.CommittedOp}}{{else}}<span class="none">—</span>{{end}}</td>
<td class="num">{{if .Behind}}{{.Behind}}{{else}}<span class="none">—</span>{{end}}</td>
<td class="num">{{if .LastContact}}{{.LastContact}}{{else}}<span class="none">—</span>{{end}}</td>
</tr>
{{end}}</tbody>
</table>
{{if not .ShowProgress}}<p class="none">Behind and last contact are known only on the master{{with .MasterAddress}} ({{.}}){{end}}.</p>{{end}}
{{if not .ShowGossip}}<p class="none">No gossip states: this replica runs without discovery (or gossip knows no member yet).</p>{{end}}
{{else}}<p class="none">No members known.</p>{{end}}

<h2>Recent membership decisions <small class="none">(by this replica, newest first)</small></h2>
{{if .Decisions}}<ol class="dec" reversed>
{{range .Decisions}}<li>{{with .Time}}<time datetime="{{.}}">{{.}}</time>{{end}}{{.Message}}</li>
{{end}}</ol>{{else}}<p class="none">None made by this replica.</p>{{end}}

<footer>Refreshes every 2 s. <a href="?format=json">JSON</a> · <a href="/metrics">metrics</a> · <a href="/healthz">health</a></footer>
</body>
</html>
`
