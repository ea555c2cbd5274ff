"""Mutual TLS, principals and ACLs against a real cell with TLS.

Run by TestPythonTLS (client/python/python_test.go), which starts a
one-replica cell with mutual TLS and --admin admin, and passes:
CHUBBY_TLS_CA, CHUBBY_TLS_CERT and CHUBBY_TLS_KEY (the Go client's
variables) naming admin's files; CHUBBY_TEST_TLS_DIR, the directory of the
cell's CA (ca.crt) and of alice's and bob's certificates (alice.crt,
alice.key, ...); CHUBBY_TEST_OTHER_TLS_DIR, another CA's directory; and
CHUBBY_TEST_STRANGER_CERT and _KEY, an "alice" certificate that other CA
signed.
"""

import os
import shutil
import tempfile
import time
import unittest
from unittest import mock

import chubbycell as cc
from helpers import cell_addrs, unique

DIR = os.environ.get("CHUBBY_TEST_TLS_DIR", "")


def files(cn):
    return os.path.join(DIR, cn + ".crt"), os.path.join(DIR, cn + ".key")


def tls_as(cn):
    """The TLSConfig of principal cn (None: anonymous) trusting the cell's CA."""
    if cn is None:
        return cc.TLSConfig(os.path.join(DIR, "ca.crt"))
    cert, key = files(cn)
    return cc.TLSConfig(os.path.join(DIR, "ca.crt"), cert, key)


class TLSTest(unittest.TestCase):

    def setUp(self):
        if not DIR or not os.environ.get("CHUBBY_TLS_CA"):
            raise RuntimeError("run these tests with go test ./client/python -run TestPythonTLS")

    def cell(self, **kw):
        c = cc.Cell(cell_addrs(), call_timeout=5.0, **kw)
        self.addCleanup(c.close)
        return c


class TestTLS(TLSTest):

    def test_env_names_the_files(self):
        # No tls argument: CHUBBY_TLS_* (admin's files), as the Go client reads them.
        c = self.cell()
        self.assertIsNotNone(c.tls)
        self.assertEqual(c.who_am_i(), ("admin", True))
        self.assertEqual(c.whoami().principal, "admin")

    def test_principals(self):
        for cn, want in (("alice", "alice"), ("bob", "bob"), (None, "anonymous")):
            c = self.cell(tls=tls_as(cn))
            me = c.who_am_i()
            self.assertEqual((me.principal, me.tls), (want, True))
            # And sessions work over it.
            with c.session() as s:
                self.assertGreater(s.id, 0)

    def test_connections_are_reused(self):
        # An idle TLS connection goes back to the pool and is used again:
        # no handshake per call.
        made = []
        orig = cc._transport.Conn.__init__

        def counting(conn, *a, **kw):
            made.append(1)
            orig(conn, *a, **kw)

        c = self.cell(tls=tls_as("alice"))
        with mock.patch.object(cc._transport.Conn, "__init__", counting):
            for _ in range(30):
                c.who_am_i()
                time.sleep(0.01)
        self.assertLessEqual(len(made), 2)

    def test_plaintext_and_strangers_get_nowhere(self):
        plain = self.cell(tls=False, connect_timeout=1.0)
        plain.call_timeout = 2.0
        with self.assertRaises(cc.TransportError):
            plain.who_am_i()
        # A client that trusts another CA refuses the replica's certificate.
        other = os.environ["CHUBBY_TEST_OTHER_TLS_DIR"]
        c = self.cell(tls=cc.TLSConfig(os.path.join(other, "ca.crt")))
        with self.assertRaises(cc.UnreachableError):
            c.who_am_i()
        # A certificate another CA signed does not pass for alice.
        c = self.cell(tls=cc.TLSConfig(os.path.join(DIR, "ca.crt"), os.environ["CHUBBY_TEST_STRANGER_CERT"],
                                       os.environ["CHUBBY_TEST_STRANGER_KEY"]))
        with self.assertRaises(cc.TransportError):
            c.who_am_i()

    def test_server_name(self):
        # The replicas' certificates name localhost and 127.0.0.1: a client
        # told to require another name refuses them.
        ca = os.path.join(DIR, "ca.crt")
        self.assertEqual(self.cell(tls=cc.TLSConfig(ca, server_name="localhost")).who_am_i(), ("anonymous", True))
        with self.assertRaises(cc.UnreachableError):
            self.cell(tls=cc.TLSConfig(ca, server_name="not-a-replica.example")).who_am_i()
        conf = cc.TLSConfig.from_env({"CHUBBY_TLS_CA": ca, "CHUBBY_TLS_SERVER_NAME": "not-a-replica.example"})
        self.assertEqual(conf.server_name, "not-a-replica.example")
        with self.assertRaises(cc.UnreachableError):
            self.cell(tls=conf).who_am_i()

    def test_bad_configuration(self):
        with self.assertRaises(cc.InvalidArgumentError):
            cc.TLSConfig.from_env({"CHUBBY_TLS_CERT": "a.crt", "CHUBBY_TLS_KEY": "a.key"})
        self.assertIsNone(cc.TLSConfig.from_env({}))
        cert, key = files("alice")
        with self.assertRaises(cc.InvalidArgumentError):
            cc.TLSConfig(os.path.join(DIR, "ca.crt"), cert)  # a cert without its key
        with self.assertRaises(cc.InvalidArgumentError):
            cc.TLSConfig(os.path.join(DIR, "missing.crt"))
        with self.assertRaises(cc.InvalidArgumentError):
            cc.TLSConfig(os.path.join(DIR, "ca.crt"), cert, files("bob")[1])  # a key of another cert
        with self.assertRaises(cc.InvalidArgumentError):
            cc.Cell(cell_addrs(), tls="yes")

    def test_renewed_files_are_read_again(self):
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        cert, key = os.path.join(tmp, "me.crt"), os.path.join(tmp, "me.key")
        for src, dst in zip(files("alice"), (cert, key)):
            shutil.copy(src, dst)
        conf = cc.TLSConfig(os.path.join(DIR, "ca.crt"), cert, key)
        self.assertEqual(self.cell(tls=conf).who_am_i().principal, "alice")
        # The operator rotates the files (key first, each by a rename).
        for src, dst in zip(reversed(files("bob")), (key, cert)):
            shutil.copy(src, dst + ".new")
            os.replace(dst + ".new", dst)
        time.sleep(cc._tls.CHECK_INTERVAL + 0.1)
        self.assertEqual(self.cell(tls=conf).who_am_i().principal, "bob")


class TestACL(TLSTest):

    def test_rights_follow_the_acl_files(self):
        admin = self.cell().session()
        alice = self.cell(tls=tls_as("alice")).session()
        bob = self.cell(tls=tls_as("bob")).session()
        team = unique("team").lstrip("/")
        d = "/" + team
        admin.mkdir(d)
        admin.create_file("/acl/" + team, b"# the team\nalice\n")
        h = admin.open(d)
        st0 = h.stat()
        self.assertEqual(st0.acl, cc.ACLNames("admin", "admin", "admin"))  # its parent's: the root's
        st = h.set_acl(cc.ACLNames(read_acl=team, write_acl=team, change_acl="admin"))
        self.assertEqual(st.acl, cc.ACLNames(team, team, "admin"))
        self.assertEqual(st.acl_generation, st0.acl_generation + 1)
        self.assertEqual(h.last_stat.acl_generation, st.acl_generation)
        with self.assertRaises(cc.GenerationMismatchError):
            h.set_acl(cc.ACLNames(team, team, team), if_acl_generation=st0.acl_generation)
        # alice (listed) creates, writes and reads in the directory; the file inherits its names.
        fst = alice.create_file(d + "/f", b"by alice")
        self.assertEqual(fst.acl, cc.ACLNames(team, team, "admin"))
        fh = alice.open(d + "/f", mode=cc.OpenMode.READ_WRITE)
        fh.write(b"v2")
        self.assertEqual(fh.read(), b"v2")
        # bob (not listed) may neither read nor write, nor change the names.
        with self.assertRaises(cc.PermissionDeniedError) as e:
            bob.open(d + "/f")
        self.assertIn("bob", e.exception.message)
        with self.assertRaises(cc.PermissionDeniedError):
            bob.create_file(d + "/g", b"")
        with self.assertRaises(cc.PermissionDeniedError):
            bob.open(d)
        with self.assertRaises(cc.PermissionDeniedError):
            alice.open(d, mode=cc.OpenMode.READ).set_acl(cc.ACLNames(team, team, team))
        # A Multi has the rights of its ops: bob's is refused, alice's applied.
        with self.assertRaises(cc.PermissionDeniedError):
            bob.multi([], [cc.Op.create(d + "/m", b"")])
        r = alice.multi([cc.Compare.exists(d + "/f")], [cc.Op.create(d + "/m", b"m")])
        self.assertTrue(r.succeeded)
        # Adding bob to the ACL file gives him the rights at once.
        admin.open("/acl/" + team, mode=cc.OpenMode.READ_WRITE).write(b"alice\nbob\n")
        self.assertEqual(bob.open(d + "/f").read(), b"v2")
        # Bad names are refused before anything is sent.
        for bad in ("a/b", "..", "x y", 5):
            with self.assertRaises(cc.InvalidArgumentError, msg=repr(bad)):
                cc.ACLNames(read_acl=bad)
        with self.assertRaises(cc.InvalidArgumentError):
            h.set_acl(("a", "b", "c"))


if __name__ == "__main__":
    unittest.main()
