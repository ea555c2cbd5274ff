package interop

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/apache/thrift/lib/go/thrift"

	"github.com/chubbygo/chubby/cell/celltest"
	chubby "github.com/chubbygo/chubby/gen/apachethrift/chubby"
	"github.com/chubbygo/chubby/rpc/tlsconf"
	"github.com/chubbygo/chubby/rpc/tlsconf/tlstest"
)

// TestGoApacheThriftClient drives a real cell with the Go code the Apache
// Thrift compiler generates (gen/apachethrift, from `./build.sh gen`) on
// the github.com/apache/thrift library — no Kitex on the client side. Like
// the Python client, it opens one connection per run, a client per service
// on it, framed or buffered, strict binary protocol; in plaintext and over
// mutual TLS (TSSLSocket with a crypto/tls configuration made from the PEM
// files, with and without a client certificate), and against a cell whose
// ACLs refuse it.
func TestGoApacheThriftClient(t *testing.T) {
	c := celltest.Start(t, celltest.Options{})
	for _, kind := range []string{"framed", "buffered"} {
		t.Run(kind, func(t *testing.T) {
			exercise(t, dialApache(t, c.Addr, kind, nil), kind, "")
		})
	}

	pki := tlstest.NewPKI(t, "cell")
	rf, gf := pki.Files(t, "replica-1", tlstest.Both), pki.Files(t, "go-client", tlstest.Client)
	replicaTLS := func() *tlsconf.Reloader {
		r, err := tlsconf.New(tlsconf.Config{Files: tlsconf.Files{Cert: rf.Cert, Key: rf.Key, CA: rf.CA}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	withCert, anonymous := clientTLS(t, gf.CA, gf.Cert, gf.Key), clientTLS(t, gf.CA, "", "")
	tc := celltest.Start(t, celltest.Options{TLS: replicaTLS()})
	for _, kind := range []string{"framed", "buffered"} {
		t.Run(kind+"/tls", func(t *testing.T) {
			exercise(t, dialApache(t, tc.Addr, kind, withCert), kind+"-tls", "go-client")
		})
		t.Run(kind+"/tls-anonymous", func(t *testing.T) {
			exercise(t, dialApache(t, tc.Addr, kind, anonymous), kind+"-tls-anonymous", "anonymous")
		})
	}
	// The cell refuses a Go client that is not in the ACLs when
	// they are on (--admin someone-else), with a ChubbyError that the
	// generated code decodes as such.
	ac := celltest.Start(t, celltest.Options{TLS: replicaTLS(), Admin: "someone-else"})
	t.Run("tls-acl-denied", func(t *testing.T) {
		a := dialApache(t, ac.Addr, "framed", withCert)
		ctx := context.Background()
		// The first master initialises the ACLs a moment after it starts.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			st, err := a.cell.GetStatus(ctx)
			if err == nil && strings.Contains(st.GetSecurity(), "ACLs: on") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("ACLs not on within 10 s: %v", err)
			}
		}
		s := createSession(t, a, "go-apache-denied")
		_, err := a.fs.Open(ctx, &chubby.OpenRequest{Session: s.Session, Path: "/go-denied",
			Mode: chubby.OpenMode_READ_WRITE, Create: chubby.CreateMode_CREATE_NEW})
		ce := wantChubbyError(t, err, chubby.ErrorCode_PERMISSION_DENIED, "Open of a file the ACLs refuse")
		if !strings.Contains(ce.Message, "go-client") {
			t.Fatalf("PERMISSION_DENIED does not name the principal go-client: %q", ce.Message)
		}
		if err := a.sess.CloseSession(ctx, &chubby.CloseSessionRequest{Session: s.Session}); err != nil {
			t.Fatalf("CloseSession: %v", err)
		}
	})
}

// apacheClient is one connection to the cell with a generated client of
// each service on it: they share the port (and here the connection), as
// the cell serves them combined.
type apacheClient struct {
	sess   *chubby.SessionClient
	fs     *chubby.FileSystemClient
	lock   *chubby.LockClient
	cell   *chubby.CellClient
	oracle *chubby.OracleClient
}

// dialApache connects to addr with the stock library: TSocket (TSSLSocket
// when tlsConf is set), a framed or buffered transport, and the binary
// protocol, strict both ways. The connection closes when the test ends.
func dialApache(t *testing.T, addr, kind string, tlsConf *tls.Config) *apacheClient {
	t.Helper()
	conf := &thrift.TConfiguration{
		ConnectTimeout:     10 * time.Second,
		SocketTimeout:      10 * time.Second,
		TLSConfig:          tlsConf,
		TBinaryStrictRead:  thrift.BoolPtr(true),
		TBinaryStrictWrite: thrift.BoolPtr(true),
	}
	var sock thrift.TTransport
	if tlsConf != nil {
		sock = thrift.NewTSSLSocketConf(addr, conf)
	} else {
		sock = thrift.NewTSocketConf(addr, conf)
	}
	var trans thrift.TTransport
	switch kind {
	case "framed":
		trans = thrift.NewTFramedTransportConf(sock, conf)
	case "buffered":
		trans = thrift.NewTBufferedTransport(sock, 8192)
	default:
		t.Fatalf("unknown transport %q", kind)
	}
	if err := trans.Open(); err != nil {
		t.Fatalf("open %s transport to %s: %v", kind, addr, err)
	}
	t.Cleanup(func() { trans.Close() })
	proto := thrift.NewTBinaryProtocolConf(trans, conf)
	c := thrift.NewTStandardClient(proto, proto)
	return &apacheClient{
		sess:   chubby.NewSessionClient(c),
		fs:     chubby.NewFileSystemClient(c),
		lock:   chubby.NewLockClient(c),
		cell:   chubby.NewCellClient(c),
		oracle: chubby.NewOracleClient(c),
	}
}

// clientTLS is a plain crypto/tls client configuration: the cell's CA, and
// the client's certificate unless cert is "" (anonymous). The server's
// name is checked against the address dialled (127.0.0.1).
func clientTLS(t *testing.T, ca, cert, key string) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s", ca)
	}
	c := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c
}

// wantChubbyError checks that err is the generated ChubbyError exception
// with code want.
func wantChubbyError(t *testing.T, err error, want chubby.ErrorCode, what string) *chubby.ChubbyError {
	t.Helper()
	var ce *chubby.ChubbyError
	if !errors.As(err, &ce) {
		t.Fatalf("%s: want ChubbyError %v, got %T %v", what, want, err, err)
	}
	if ce.Code != want {
		t.Fatalf("%s: want ChubbyError %v, got %v: %s", what, want, ce.Code, ce.Message)
	}
	return ce
}

func createSession(t *testing.T, a *apacheClient, name string) *chubby.CreateSessionResponse {
	t.Helper()
	r, err := a.sess.CreateSession(context.Background(), &chubby.CreateSessionRequest{ClientName: name})
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	if r.Session <= 0 || r.LeaseMs <= 0 || r.Epoch <= 0 {
		t.Fatalf("CreateSession: session %d, lease %d ms, epoch %d", r.Session, r.LeaseMs, r.Epoch)
	}
	return r
}

// exercise goes through every service: who the cell takes the client for
// (principal: "" for plaintext), a session and its lease, a file's
// contents and its event, a lock and its sequencer, errors, Multi, the
// timestamp oracle, and the clean end of it all.
func exercise(t *testing.T, a *apacheClient, name, principal string) {
	ctx := context.Background()
	fatal := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	me, err := a.cell.WhoAmI(ctx)
	fatal("Cell.WhoAmI", err)
	if principal == "" {
		if me.TLS || me.Principal != "anonymous" {
			t.Fatalf("Cell.WhoAmI in plaintext: %+v, want anonymous without TLS", me)
		}
	} else if !me.TLS || me.Principal != principal {
		t.Fatalf("Cell.WhoAmI over TLS: %+v, want %s over TLS", me, principal)
	}
	status, err := a.cell.GetStatus(ctx)
	fatal("Cell.GetStatus", err)
	if status.MasterAddress == "" || len(status.Replicas) != 1 {
		t.Fatalf("Cell.GetStatus: master %q, %d replicas", status.MasterAddress, len(status.Replicas))
	}
	master, err := a.cell.GetMaster(ctx, &chubby.GetMasterRequest{})
	fatal("Cell.GetMaster", err)
	if master.MasterAddress != status.MasterAddress || master.Epoch != status.Epoch {
		t.Fatalf("Cell.GetMaster: %s epoch %d, GetStatus says %s epoch %d",
			master.MasterAddress, master.Epoch, status.MasterAddress, status.Epoch)
	}

	sr := createSession(t, a, "go-apache-"+name)
	s := sr.Session

	// A file, opened for its own FILE_CONTENTS_MODIFIED events.
	path := "/go-" + name
	o, err := a.fs.Open(ctx, &chubby.OpenRequest{Session: s, Path: path, Mode: chubby.OpenMode_READ_WRITE,
		Create: chubby.CreateMode_CREATE_NEW, EventMask: thrift.Int32Ptr(chubby.EVENT_MASK_FILE_CONTENTS_MODIFIED)})
	fatal("FileSystem.Open", err)
	if !o.Created || o.Handle.Path != path || o.Handle.Session != s || o.Stat.Kind != chubby.NodeKind_FILE {
		t.Fatalf("FileSystem.Open %s: created %v, handle %+v, stat %+v", path, o.Created, o.Handle, o.Stat)
	}
	h := o.Handle
	content := []byte("hello from go, \x00\xff binary")
	st, err := a.fs.SetContents(ctx, &chubby.SetContentsRequest{Handle: h, Content: content})
	fatal("FileSystem.SetContents", err)
	if st.ContentGeneration != 2 || st.Size != int64(len(content)) {
		t.Fatalf("FileSystem.SetContents: generation %d size %d, want 2 and %d", st.ContentGeneration, st.Size, len(content))
	}
	// A compare-and-swap on the old generation is refused.
	_, err = a.fs.SetContents(ctx, &chubby.SetContentsRequest{Handle: h, Content: []byte("lost"), ExpectedGeneration: thrift.Int64Ptr(1)})
	wantChubbyError(t, err, chubby.ErrorCode_GENERATION_MISMATCH, "SetContents with a stale expected_generation")
	r, err := a.fs.GetContentsAndStat(ctx, &chubby.HandleRequest{Handle: h})
	fatal("FileSystem.GetContentsAndStat", err)
	if !bytes.Equal(r.Content, content) || r.Stat.ContentGeneration != 2 || r.Stat.Size != int64(len(content)) || r.Stat.Path != path {
		t.Fatalf("FileSystem.GetContentsAndStat: %q generation %d size %d path %s, want %q generation 2",
			r.Content, r.Stat.ContentGeneration, r.Stat.Size, r.Stat.Path, content)
	}

	// KeepAlive: the write queued an event, so the cell answers at once,
	// with the lease and the event.
	ka, err := a.sess.KeepAlive(ctx, &chubby.KeepAliveRequest{Sessions: []*chubby.KeepAliveItem{{Session: s}}, Epoch: &sr.Epoch})
	fatal("Session.KeepAlive", err)
	if len(ka.Results) != 1 || ka.Epoch != sr.Epoch {
		t.Fatalf("Session.KeepAlive: %d results, epoch %d (want 1, %d)", len(ka.Results), ka.Epoch, sr.Epoch)
	}
	g := ka.Results[0]
	if g.Session != s || g.Error != nil || g.LeaseMs <= 0 {
		t.Fatalf("Session.KeepAlive: grant %+v, want session %d's lease without error", g, s)
	}
	var ev *chubby.Event
	for _, e := range g.Events {
		if e.Kind == chubby.EventKind_FILE_CONTENTS_MODIFIED {
			ev = e
		}
	}
	if ev == nil || ev.Seq <= 0 || ev.GetPath() != path || ev.GetHandle() != h.ID || ev.GetContentGeneration() != 2 {
		t.Fatalf("Session.KeepAlive: events %v, want FILE_CONTENTS_MODIFIED of %s at generation 2", g.Events, path)
	}

	// The lock and its sequencer.
	seq, err := a.lock.TryAcquire(ctx, &chubby.TryAcquireRequest{Handle: h, Mode: chubby.LockMode_EXCLUSIVE})
	fatal("Lock.TryAcquire", err)
	if seq.LockGeneration != 1 || seq.Path != path || seq.Mode != chubby.LockMode_EXCLUSIVE || seq.Instance != h.Instance {
		t.Fatalf("Lock.TryAcquire: %+v", seq)
	}
	_, err = a.lock.TryAcquire(ctx, &chubby.TryAcquireRequest{Handle: h, Mode: chubby.LockMode_EXCLUSIVE})
	wantChubbyError(t, err, chubby.ErrorCode_LOCK_HELD, "TryAcquire of a lock the handle holds")
	got, err := a.lock.GetSequencer(ctx, &chubby.HandleRequest{Handle: h})
	fatal("Lock.GetSequencer", err)
	if !got.Equals(seq) {
		t.Fatalf("Lock.GetSequencer: %+v, TryAcquire gave %+v", got, seq)
	}
	v, err := a.lock.CheckSequencer(ctx, &chubby.CheckSequencerRequest{Sequencer: seq})
	fatal("Lock.CheckSequencer", err)
	if !v.Valid {
		t.Fatalf("Lock.CheckSequencer while held: invalid: %s", v.Reason)
	}
	fatal("Lock.Release", a.lock.Release(ctx, &chubby.HandleRequest{Handle: h}))
	v, err = a.lock.CheckSequencer(ctx, &chubby.CheckSequencerRequest{Sequencer: seq})
	fatal("Lock.CheckSequencer", err)
	if v.Valid || v.Reason == "" {
		t.Fatalf("Lock.CheckSequencer after Release: valid %v, reason %q", v.Valid, v.Reason)
	}
	_, err = a.lock.GetSequencer(ctx, &chubby.HandleRequest{Handle: h})
	wantChubbyError(t, err, chubby.ErrorCode_LOCK_NOT_HELD, "GetSequencer after Release")

	// Errors arrive as the generated exception type.
	_, err = a.fs.Open(ctx, &chubby.OpenRequest{Session: s, Path: "/no/such", Mode: chubby.OpenMode_READ, Create: chubby.CreateMode_OPEN_EXISTING})
	wantChubbyError(t, err, chubby.ErrorCode_NOT_FOUND, "Open OPEN_EXISTING of a missing path")
	_, err = a.fs.Open(ctx, &chubby.OpenRequest{Session: s, Path: "bad path", Mode: chubby.OpenMode_READ, Create: chubby.CreateMode_OPEN_EXISTING})
	wantChubbyError(t, err, chubby.ErrorCode_INVALID_ARGUMENT, "Open of a malformed path")

	// Multi: a directory and a file in it, all or nothing, then the same
	// again, refused by its compare.
	dir := path + "-dir"
	multi := &chubby.MultiRequest{Session: s,
		Compares: []*chubby.Compare{{Path: dir, Kind: chubby.CompareKind_NOT_EXISTS}},
		Ops: []*chubby.MultiOp{
			{Kind: chubby.MultiOpKind_CREATE, Path: dir, Directory: thrift.BoolPtr(true)},
			{Kind: chubby.MultiOpKind_CREATE, Path: dir + "/f", Content: []byte("from multi")},
		}}
	mr, err := a.fs.Multi(ctx, multi)
	fatal("FileSystem.Multi", err)
	if !mr.Succeeded || len(mr.Stats) != 2 || mr.Stats[0].Kind != chubby.NodeKind_DIRECTORY ||
		mr.Stats[1].Path != dir+"/f" || mr.Stats[1].Size != int64(len("from multi")) {
		t.Fatalf("FileSystem.Multi: %+v", mr)
	}
	mr, err = a.fs.Multi(ctx, multi)
	fatal("FileSystem.Multi again", err)
	if mr.Succeeded || mr.GetFailedCompare() != 0 || !mr.IsSetFailedCompare() || len(mr.Stats) != 0 {
		t.Fatalf("FileSystem.Multi again: %+v, want compare 0 failed", mr)
	}
	do, err := a.fs.Open(ctx, &chubby.OpenRequest{Session: s, Path: dir, Mode: chubby.OpenMode_READ_WRITE, Create: chubby.CreateMode_OPEN_EXISTING})
	fatal("FileSystem.Open "+dir, err)
	rd, err := a.fs.ReadDir(ctx, &chubby.ReadDirRequest{Handle: do.Handle})
	fatal("FileSystem.ReadDir", err)
	if len(rd.Entries) != 1 || rd.Entries[0].Name != "f" || rd.Entries[0].Stat.Kind != chubby.NodeKind_FILE {
		t.Fatalf("FileSystem.ReadDir %s: %+v", dir, rd.Entries)
	}
	err = a.fs.Delete(ctx, &chubby.DeleteRequest{Handle: do.Handle})
	wantChubbyError(t, err, chubby.ErrorCode_NOT_EMPTY, "Delete of a non-empty directory")
	fatal("FileSystem.Delete recursive", a.fs.Delete(ctx, &chubby.DeleteRequest{Handle: do.Handle, Recursive: thrift.BoolPtr(true)}))

	// The timestamp oracle: strictly increasing.
	ts, err := a.oracle.GetTimestamps(ctx, &chubby.GetTimestampsRequest{Count: 10})
	fatal("Oracle.GetTimestamps", err)
	ts2, err := a.oracle.GetTimestamps(ctx, &chubby.GetTimestampsRequest{Count: 1})
	fatal("Oracle.GetTimestamps", err)
	if ts.Count != 10 || ts.First <= 0 || ts2.Count != 1 || ts2.First < ts.First+10 || ts.Epoch != sr.Epoch {
		t.Fatalf("Oracle.GetTimestamps: %+v then %+v", ts, ts2)
	}

	// The clean end: after CloseSession the session is gone.
	fatal("FileSystem.Delete", a.fs.Delete(ctx, &chubby.DeleteRequest{Handle: h}))
	fatal("FileSystem.Close", a.fs.Close(ctx, &chubby.CloseRequest{Handle: h}))
	fatal("Session.CloseSession", a.sess.CloseSession(ctx, &chubby.CloseSessionRequest{Session: s}))
	_, err = a.fs.Open(ctx, &chubby.OpenRequest{Session: s, Path: "/", Mode: chubby.OpenMode_READ, Create: chubby.CreateMode_OPEN_EXISTING})
	wantChubbyError(t, err, chubby.ErrorCode_SESSION_EXPIRED, "Open in a closed session")
}
