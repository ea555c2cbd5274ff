"""A plain Apache Thrift client of the cell, in Python.

Generated from idl/chubby.thrift by the Apache Thrift compiler (the test
runs `thrift --gen py` into a temporary directory and puts it on sys.path).
It talks to one cell port with a separate client per service, as any
non-Go program would, over the transport named on the command line:
framed or buffered, strict binary protocol, in plaintext or over mutual
TLS (Apache Thrift's TSSLSocket). It prints one line per check and exits
non-zero on the first failure.

usage: client.py HOST PORT framed|buffered [CA CERT KEY PRINCIPAL [denied]]

With CA (the cell's CA), CERT and KEY (this client's certificate, whose
common name PRINCIPAL is) it speaks TLS and checks that the cell takes it
for PRINCIPAL; CERT and KEY given as "-" mean no certificate (anonymous).
With "denied" it checks instead that the cell's ACLs refuse PRINCIPAL a
file of its own, with PERMISSION_DENIED naming it.
"""
import ssl
import sys

from thrift.protocol import TBinaryProtocol
from thrift.transport import TSocket, TSSLSocket, TTransport

from chubby import Session, FileSystem, Lock, Cell
from chubby.ttypes import (CreateSessionRequest, CloseSessionRequest, OpenRequest, OpenMode,
                           CreateMode, SetContentsRequest, HandleRequest, TryAcquireRequest,
                           LockMode, CheckSequencerRequest, CloseRequest, ChubbyError,
                           ErrorCode, DeleteRequest)


def connect(host, port, kind, tls=None):
    if tls:
        ca, cert, key = tls
        kw = dict(cert_reqs=ssl.CERT_REQUIRED, ca_certs=ca)
        if cert != "-":
            kw.update(certfile=cert, keyfile=key)
        sock = TSSLSocket.TSSLSocket(host, port, **kw)
    else:
        sock = TSocket.TSocket(host, port)
    sock.setTimeout(10000)
    if kind == "framed":
        trans = TTransport.TFramedTransport(sock)
    else:
        trans = TTransport.TBufferedTransport(sock)
    proto = TBinaryProtocol.TBinaryProtocol(trans)
    trans.open()
    return trans, proto


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)
    print("ok:", what)


def main():
    host, port, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    tls = tuple(sys.argv[4:7]) if len(sys.argv) > 4 else None
    trans, proto = connect(host, port, kind, tls)
    sess = Session.Client(proto)
    fsys = FileSystem.Client(proto)
    lock = Lock.Client(proto)
    cell = Cell.Client(proto)

    me = cell.WhoAmI()
    if tls:
        want = sys.argv[7]
        check(me.tls and me.principal == want, "Cell.WhoAmI over TLS: %s (want %s)" % (me.principal, want))
        kind += "-tls-" + want
    else:
        check(not me.tls and me.principal == "anonymous", "Cell.WhoAmI in plaintext: anonymous")

    status = cell.GetStatus()
    check(status.master_address != "", "Cell.GetStatus names a master")
    s = sess.CreateSession(CreateSessionRequest(client_name="python-" + kind)).session
    check(s > 0, "Session.CreateSession")
    if len(sys.argv) > 8 and sys.argv[8] == "denied":
        try:
            fsys.Open(OpenRequest(session=s, path="/py-denied", mode=OpenMode.READ_WRITE,
                                  create=CreateMode.CREATE_NEW))
            check(False, "the ACLs must refuse " + me.principal)
        except ChubbyError as e:
            check(e.code == ErrorCode.PERMISSION_DENIED and me.principal in e.message,
                  "ChubbyError PERMISSION_DENIED for %s: %s" % (me.principal, e.message))
        sess.CloseSession(CloseSessionRequest(session=s))
        trans.close()
        return

    path = "/py-" + kind
    o = fsys.Open(OpenRequest(session=s, path=path, mode=OpenMode.READ_WRITE,
                              create=CreateMode.CREATE_NEW))
    check(o.created and o.handle.path == path, "FileSystem.Open creates " + path)
    st = fsys.SetContents(SetContentsRequest(handle=o.handle, content=b"hello from python"))
    check(st.content_generation == 2, "FileSystem.SetContents bumps the generation")
    r = fsys.GetContentsAndStat(HandleRequest(handle=o.handle))
    check(r.content == b"hello from python" and r.stat.size == 17, "FileSystem.GetContentsAndStat")

    seq = lock.TryAcquire(TryAcquireRequest(handle=o.handle, mode=LockMode.EXCLUSIVE))
    check(seq.lock_generation == 1 and seq.path == path, "Lock.TryAcquire")
    v = lock.CheckSequencer(CheckSequencerRequest(sequencer=seq))
    check(v.valid, "Lock.CheckSequencer: valid while held")
    lock.Release(HandleRequest(handle=o.handle))
    v = lock.CheckSequencer(CheckSequencerRequest(sequencer=seq))
    check(not v.valid, "Lock.CheckSequencer: invalid after release")

    try:
        fsys.Open(OpenRequest(session=s, path="/no/such", mode=OpenMode.READ,
                              create=CreateMode.OPEN_EXISTING))
        check(False, "Open of a missing path must fail")
    except ChubbyError as e:
        check(e.code == ErrorCode.NOT_FOUND, "ChubbyError NOT_FOUND arrives as an exception")
    try:
        fsys.Open(OpenRequest(session=s, path="bad path", mode=OpenMode.READ,
                              create=CreateMode.OPEN_EXISTING))
        check(False, "Open of a malformed path must fail")
    except ChubbyError as e:
        check(e.code == ErrorCode.INVALID_ARGUMENT, "ChubbyError INVALID_ARGUMENT for a malformed path")

    fsys.Delete(DeleteRequest(handle=o.handle))
    fsys.Close(CloseRequest(handle=o.handle))
    sess.CloseSession(CloseSessionRequest(session=s))
    check(True, "Delete, Close, CloseSession")
    trans.close()


if __name__ == "__main__":
    main()
