package cell

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client/callopt"

	"github.com/chubbygo/chubby/fs"
	"github.com/chubbygo/chubby/gen/chubby"
	"github.com/chubbygo/chubby/gen/chubby/combineservice"
	"github.com/chubbygo/chubby/rpc"
	"github.com/chubbygo/chubby/rpc/tlsconf/tlstest"
)

// aclCell is a one-replica TLS cell with ACLs (--admin admin) and raw
// Kitex clients on TLS, one per principal.
type aclCell struct {
	t   *testing.T
	s   *Server
	ca  *tlstest.PKI
	cli map[string]combineservice.Client // by principal; "" is anonymous
}

func startACLCell(t *testing.T) *aclCell {
	t.Helper()
	ca := tlstest.NewPKI(t, "cell")
	// A frozen clock: refused commands do not move the state's clock, so
	// the state compares byte for byte.
	frozen := time.Unix(1_800_000_000, 0)
	tc := &testCell{t: t, done: make(chan error, 1)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Listener: ln, DataDir: t.TempDir(), Logger: quietLogger(), Now: func() time.Time { return frozen },
		TLS: ca.Reloader(t, "replica-1", tlstest.Both, ca), Admin: "admin", Lease: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	tc.s = s
	go func() { tc.done <- s.Serve(ctx) }()
	t.Cleanup(tc.stop)
	c := &aclCell{t: t, s: s, ca: ca, cli: map[string]combineservice.Client{}}
	for _, p := range []string{"admin", "bob", ""} {
		c.cli[p] = c.connect(p)
	}
	for deadline := time.Now().Add(10 * time.Second); !s.aclsInitialised(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("ACLs not initialised within 10 s")
		}
	}
	return c
}

// connect returns a raw client calling as principal p ("": anonymous).
func (c *aclCell) connect(p string) combineservice.Client {
	c.t.Helper()
	cfg := rpc.ClientConfig{Addrs: []string{c.s.Addr()}, RPCTimeout: 5 * time.Second, TLS: c.ca.ClientTLS(c.t, p)}
	opts, err := rpc.ClientOptions(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	kc, err := combineservice.NewClient("chubby", opts...)
	if err != nil {
		c.t.Fatal(err)
	}
	for i := 0; ; i++ {
		if _, err := kc.WhoAmI(ctx); err == nil {
			return kc
		} else if i == 200 {
			c.t.Fatalf("cell never answered %q: %v", p, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (c *aclCell) session(p string) chubby.SessionID {
	c.t.Helper()
	r, err := c.cli[p].CreateSession(ctx, &chubby.CreateSessionRequest{ClientName: p})
	if err != nil {
		c.t.Fatal(err)
	}
	return r.Session
}

func (c *aclCell) open(p string, s chubby.SessionID, path string, mode chubby.OpenMode, create chubby.CreateMode, content string) *chubby.Handle {
	c.t.Helper()
	req := &chubby.OpenRequest{Session: s, Path: path, Mode: mode, Create: create}
	if content != "" {
		req.InitialContent = []byte(content)
	}
	r, err := c.cli[p].Open(ctx, req)
	if err != nil {
		c.t.Fatalf("%s opens %s: %v", p, path, err)
	}
	return r.Handle
}

func (c *aclCell) setACL(hd *chubby.Handle, read, write, change string) {
	c.t.Helper()
	if _, err := c.cli["admin"].SetACL(ctx, &chubby.SetACLRequest{Handle: hd, Acl: &chubby.ACLNames{ReadAcl: read, WriteAcl: write, ChangeAcl: change}}); err != nil {
		c.t.Fatalf("SetACL %s: %v", hd.Path, err)
	}
}

// TestRPCRights: every RPC that needs a right refuses a principal without
// it with PERMISSION_DENIED naming the principal, the node and the right,
// and the state is byte for byte what it was; every RPC that needs none
// works for anyone. Through the real server on TLS: the principal comes
// from the client's certificate.
func TestRPCRights(t *testing.T) {
	c := startACLCell(t)
	rw, ro := chubby.OpenMode_READ_WRITE, chubby.OpenMode_READ
	create, existing := chubby.CreateMode_CREATE_NEW, chubby.CreateMode_OPEN_EXISTING
	adm := c.session("admin")
	// /acl/everyone lets every principal read /pub; the rest is admin's.
	c.open("admin", adm, "/acl/everyone", rw, create, "*\n")
	if _, err := c.cli["admin"].Mkdir(ctx, &chubby.MkdirRequest{Session: adm, Path: "/pub"}); err != nil {
		t.Fatal(err)
	}
	c.setACL(c.open("admin", adm, "/pub", ro, existing, ""), "everyone", "admin", "admin")
	c.open("admin", adm, "/pub/f", rw, create, "public")
	c.open("admin", adm, "/pub/g", rw, create, "soon secret")
	c.open("admin", adm, "/pub/w", rw, create, "soon read-only")
	if _, err := c.cli["admin"].Mkdir(ctx, &chubby.MkdirRequest{Session: adm, Path: "/pub/d"}); err != nil {
		t.Fatal(err)
	}
	secret := c.open("admin", adm, "/secret", rw, create, "admin only")
	seq, err := c.cli["admin"].TryAcquire(ctx, &chubby.TryAcquireRequest{Handle: secret, Mode: chubby.LockMode_EXCLUSIVE})
	if err != nil {
		t.Fatal(err)
	}
	c.setACL(c.open("admin", adm, "/pub/w", ro, existing, ""), "everyone", "everyone", "admin")

	bob := c.session("bob")
	hf := c.open("bob", bob, "/pub/f", ro, existing, "")
	hg := c.open("bob", bob, "/pub/g", ro, existing, "")
	hd := c.open("bob", bob, "/pub/d", ro, existing, "")
	hw := c.open("bob", bob, "/pub/w", rw, existing, "")
	// Rights taken away after bob opened: the calls check again.
	c.setACL(c.open("admin", adm, "/pub/g", ro, existing, ""), "admin", "admin", "admin")
	c.setACL(c.open("admin", adm, "/pub/d", ro, existing, ""), "admin", "admin", "admin")
	c.setACL(c.open("admin", adm, "/pub/w", ro, existing, ""), "everyone", "admin", "admin")
	anon := c.session("")

	b, a := c.cli["bob"], c.cli[""]
	tests := []struct {
		rpc, who, path, right string
		call                  func() error
	}{
		{"Open READ", "bob", "/secret", "read", func() error {
			_, err := b.Open(ctx, &chubby.OpenRequest{Session: bob, Path: "/secret", Mode: ro, Create: existing})
			return err
		}},
		{"Open READ_WRITE", "bob", "/pub/f", "write", func() error {
			_, err := b.Open(ctx, &chubby.OpenRequest{Session: bob, Path: "/pub/f", Mode: rw, Create: existing})
			return err
		}},
		{"Open creating", "bob", "/pub", "write", func() error {
			_, err := b.Open(ctx, &chubby.OpenRequest{Session: bob, Path: "/pub/new", Mode: ro, Create: chubby.CreateMode_OPEN_OR_CREATE})
			return err
		}},
		{"Open by anonymous", "anonymous", "/pub", "read", func() error {
			_, err := a.Open(ctx, &chubby.OpenRequest{Session: anon, Path: "/pub", Mode: ro, Create: existing})
			return err
		}},
		{"GetContentsAndStat", "bob", "/pub/g", "read", func() error {
			_, err := b.GetContentsAndStat(ctx, &chubby.HandleRequest{Handle: hg})
			return err
		}},
		{"GetStat", "bob", "/pub/g", "read", func() error { _, err := b.GetStat(ctx, &chubby.HandleRequest{Handle: hg}); return err }},
		{"ReadDir", "bob", "/pub/d", "read", func() error { _, err := b.ReadDir(ctx, &chubby.ReadDirRequest{Handle: hd}); return err }},
		{"SetContents", "bob", "/pub/w", "write", func() error {
			_, err := b.SetContents(ctx, &chubby.SetContentsRequest{Handle: hw, Content: []byte("mine")})
			return err
		}},
		{"Delete", "bob", "/pub", "write", func() error { return b.Delete(ctx, &chubby.DeleteRequest{Handle: hw}) }},
		{"Mkdir", "bob", "/pub", "write", func() error {
			_, err := b.Mkdir(ctx, &chubby.MkdirRequest{Session: bob, Path: "/pub/sub"})
			return err
		}},
		{"CreateFile", "bob", "/pub", "write", func() error {
			_, err := b.CreateFile(ctx, &chubby.CreateFileRequest{Session: bob, Path: "/pub/x"})
			return err
		}},
		{"SetACL", "bob", "/pub/f", "change_acl", func() error {
			_, err := b.SetACL(ctx, &chubby.SetACLRequest{Handle: hf, Acl: &chubby.ACLNames{}})
			return err
		}},
		{"Acquire", "bob", "/pub/f", "write", func() error {
			_, err := b.Acquire(ctx, &chubby.AcquireRequest{Handle: hf, Mode: chubby.LockMode_EXCLUSIVE, WaitMs: 100})
			return err
		}},
		{"TryAcquire", "bob", "/pub/f", "write", func() error {
			_, err := b.TryAcquire(ctx, &chubby.TryAcquireRequest{Handle: hf, Mode: chubby.LockMode_SHARED})
			return err
		}},
		{"CheckSequencer", "bob", "/secret", "read", func() error {
			_, err := b.CheckSequencer(ctx, &chubby.CheckSequencerRequest{Sequencer: seq})
			return err
		}},
		{"RemoveMember", "bob", "/", "change_acl", func() error {
			_, err := b.RemoveMember(ctx, &chubby.RemoveMemberRequest{Id: "1"})
			return err
		}},
		// Another principal's session is not bob's to use.
		{"KeepAlive of another's session", "bob", "", "session", func() error {
			_, err := b.KeepAlive(ctx, &chubby.KeepAliveRequest{Sessions: []*chubby.KeepAliveItem{{Session: adm}}})
			return err
		}},
		{"CloseSession of another's session", "bob", "", "session", func() error {
			return b.CloseSession(ctx, &chubby.CloseSessionRequest{Session: adm})
		}},
		{"Open in another's session", "bob", "", "session", func() error {
			_, err := b.Open(ctx, &chubby.OpenRequest{Session: adm, Path: "/secret", Mode: ro, Create: existing})
			return err
		}},
		{"Release through another's handle", "bob", "", "session", func() error { return b.Release(ctx, &chubby.HandleRequest{Handle: secret}) }},
	}
	for _, tt := range tests {
		t.Run(tt.rpc, func(t *testing.T) {
			before := stateBytes(c.s.m)
			err := tt.call()
			if fs.Code(err) != chubby.ErrorCode_PERMISSION_DENIED {
				t.Fatalf("%s by %s: %v, want PERMISSION_DENIED", tt.rpc, tt.who, err)
			}
			msg := err.Error()
			want := []string{`"` + tt.who + `"`}
			if tt.right != "session" {
				want = append(want, tt.right+" right", `"`+tt.path+`"`)
			}
			for _, w := range want {
				if !strings.Contains(msg, w) {
					t.Errorf("refusal %q does not name %s", msg, w)
				}
			}
			if !bytes.Equal(before, stateBytes(c.s.m)) {
				t.Error("a refused call changed the state")
			}
		})
	}

	// What needs no right works for bob, and admin's rights work.
	for name, call := range map[string]func() error{
		"WhoAmI":    func() error { _, err := b.WhoAmI(ctx); return err },
		"GetMaster": func() error { _, err := b.GetMaster(ctx, &chubby.GetMasterRequest{}); return err },
		"GetStatus": func() error { _, err := b.GetStatus(ctx); return err },
		"GetSequencer": func() error {
			_, err := b.GetSequencer(ctx, &chubby.HandleRequest{Handle: hf})
			return ignoreCode(err, chubby.ErrorCode_LOCK_NOT_HELD)
		},
		"Release": func() error {
			return ignoreCode(b.Release(ctx, &chubby.HandleRequest{Handle: hf}), chubby.ErrorCode_LOCK_NOT_HELD)
		},
		"KeepAlive own": func() error {
			_, err := b.KeepAlive(ctx, &chubby.KeepAliveRequest{Sessions: []*chubby.KeepAliveItem{{Session: bob}}}, callopt.WithRPCTimeout(10*time.Second))
			return err
		},
		"admin writes /pub/w": func() error {
			_, err := c.cli["admin"].SetContents(ctx, &chubby.SetContentsRequest{Handle: c.open("admin", adm, "/pub/w", rw, existing, ""), Content: []byte("x")})
			return err
		},
		"Close": func() error { return b.Close(ctx, &chubby.CloseRequest{Handle: hg}) },
	} {
		if err := call(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// ignoreCode is err unless it has code.
func ignoreCode(err error, code chubby.ErrorCode) error {
	if fs.Code(err) == code {
		return nil
	}
	return err
}
