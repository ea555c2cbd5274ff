package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chubbygo/chubby/cell/celltest"
	"github.com/chubbygo/chubby/rpc/tlsconf/tlstest"
)

// TestACLCommands drives a TLS cell with ACLs (--admin admin) from the
// command line: whoami, acl get/set, and a refusal that names the
// principal, the node and the right.
func TestACLCommands(t *testing.T) {
	pki := tlstest.NewPKI(t, "cell")
	c := celltest.Start(t, celltest.Options{TLS: pki.Reloader(t, "replica-1", tlstest.Both, nil), Admin: "admin", Lease: 2 * time.Second})
	as := func(cn string, stdin string, args ...string) result {
		t.Helper()
		f := pki.Files(t, cn, tlstest.Client)
		return chubbyfs(t, nil, stdin, append([]string{"--cell", c.Addr, "--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key}, args...)...)
	}
	// The ACLs come from --admin at the first master, a moment after start.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if res := as("admin", "", "acl", "get", "/"); res.code == exitOK {
			want(t, res, exitOK, "read:           admin", "")
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("acl get /: %+v", res)
		}
	}
	want(t, as("bob", "", "whoami"), exitOK, "bob\tmutual TLS", "")
	want(t, chubbyfs(t, map[string]string{"CHUBBY_TLS_CA": pki.CAFile()}, "", "--cell", c.Addr, "whoami"), exitOK, "anonymous\tmutual TLS", "")
	want(t, as("bob", "hi", "write", "/team-a"), exitRefused, "", `principal "bob" lacks the write right on "/"`)

	// admin gives bob a directory of his own.
	want(t, as("admin", "bob\n", "write", "/acl/team-a"), exitOK, "", "")
	want(t, as("admin", "", "mkdir", "/team-a"), exitOK, "", "")
	want(t, as("admin", "", "acl", "set", "/team-a", "--read", "", "--write", "team-a"), exitOK, "acl_generation: 1", "")
	want(t, as("admin", "", "acl", "get", "/team-a"), exitOK, "write:          team-a", "")
	var set, got aclJSON
	if res := as("admin", "", "acl", "set", "--json", "/team-a", "--read", ""); res.code != exitOK || json.Unmarshal([]byte(res.stdout), &set) != nil {
		t.Fatalf("acl set --json: %+v", res)
	}
	if res := as("admin", "", "acl", "get", "--json", "/team-a"); res.code != exitOK || json.Unmarshal([]byte(res.stdout), &got) != nil {
		t.Fatalf("acl get --json: %+v", res)
	}
	if set != got || set.Path != "/team-a" || set.Read != "" || set.Write != "team-a" || set.ChangeACL == "" || set.ACLGeneration != 2 {
		t.Errorf("acl set --json = %+v, acl get --json = %+v", set, got)
	}
	var who whoamiJSON
	if res := as("bob", "", "whoami", "--json"); res.code != exitOK || json.Unmarshal([]byte(res.stdout), &who) != nil || who != (whoamiJSON{Principal: "bob", TLS: true}) {
		t.Errorf("whoami --json as bob: %+v", res)
	}
	want(t, as("bob", "hi", "write", "/team-a/notes"), exitOK, "", "")
	want(t, as("bob", "", "cat", "/team-a/notes"), exitOK, "hi", "")
	want(t, as("carol", "", "cat", "/team-a/notes"), exitOK, "hi", "")
	want(t, as("carol", "mine", "write", "/team-a/notes"), exitRefused, "", `principal "carol" lacks the write right on "/team-a/notes"`)
	// Only admin may change the ACLs; a stale generation is refused.
	want(t, as("bob", "", "acl", "set", "/team-a", "--read", ""), exitRefused, "", "change_acl right")
	want(t, as("admin", "", "acl", "set", "/team-a", "--read", "", "--if-generation", "7"), exitRefused, "", "")
	// A typo in an ACL file is refused rather than locking everyone out.
	want(t, as("admin", "not a principal\n", "write", "/acl/team-a"), exitRefused, "", "line 1")
	// Without TLS flags the client speaks plaintext, which a TLS cell
	// refuses; chubbyfs finds the cell speaks TLS and says what to give.
	want(t, at(t, c.Addr, "", "whoami"), exitRefused, "",
		"chubbyfs: whoami: the cell speaks TLS (at "+c.Addr+"): give --tls-ca (or $CHUBBY_TLS_CA)")
}

// TestTimestampsCommand: ts prints increasing timestamps; bad counts are
// usage errors.
func TestTimestampsCommand(t *testing.T) {
	c := celltest.Start(t, celltest.Options{})
	r := at(t, c.Addr, "", "ts", "3")
	want(t, r, exitOK, "", "")
	lines := strings.Fields(r.stdout)
	if len(lines) != 3 {
		t.Fatalf("ts 3 printed %q", r.stdout)
	}
	prev := int64(0)
	for _, l := range lines {
		v, err := strconv.ParseInt(l, 10, 64)
		if err != nil || v <= prev {
			t.Fatalf("ts 3 printed %q", r.stdout)
		}
		prev = v
	}
	r = at(t, c.Addr, "", "ts")
	if v, err := strconv.ParseInt(strings.TrimSpace(r.stdout), 10, 64); err != nil || v <= prev {
		t.Fatalf("ts after %d printed %q", prev, r.stdout)
	}
	want(t, at(t, c.Addr, "", "ts", "0"), exitUsage, "", "N must be")
	want(t, at(t, c.Addr, "", "ts", "x"), exitUsage, "", "N must be")
}

// TestTLSToPlaintextCell: a client given --tls-ca talking to a plaintext
// cell hears that the cell does not speak TLS, not "get connection error:
// EOF".
func TestTLSToPlaintextCell(t *testing.T) {
	pki := tlstest.NewPKI(t, "cell")
	c := celltest.Start(t, celltest.Options{})
	f := pki.Files(t, "bob", tlstest.Client)
	r := chubbyfs(t, nil, "", "--cell", c.Addr, "--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key, "whoami")
	want(t, r, exitRefused, "", "chubbyfs: whoami: the cell does not speak TLS (at "+c.Addr+"): leave out --tls-ca and $CHUBBY_TLS_CA\n")
}
