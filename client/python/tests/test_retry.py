"""Finding the master, following NOT_MASTER, and exactly-once retries."""

import logging
import time
import unittest

import chubbycell as cc
from helpers import Proxy, cell_addrs, free_addr, unique


def master_and_others():
    """The master's address and the other replicas', as the cell says."""
    with cc.Cell(cell_addrs()) as c:
        m = c.get_master().address
    return m, [a for a in cell_addrs() if a != m]


class TestNotMaster(unittest.TestCase):

    def test_follows_not_master_from_a_replica(self):
        master, others = master_and_others()
        self.assertTrue(others, "the test cell has more than one replica")
        with cc.Cell([others[0]]) as c:
            with self.assertLogs("chubbycell", level=logging.DEBUG) as logs:
                with c.session() as s:
                    p = unique("nm")
                    h = s.open(p, mode=cc.OpenMode.READ_WRITE, create=cc.CreateMode.CREATE_NEW)
                    h.write(b"via the hint")
                    self.assertEqual(h.read(), b"via the hint")
            self.assertEqual(c.master_address, master)
            followed = [r for r in logs.output if "NOT_MASTER from %s" % others[0] in r and "followed: True" in r]
            self.assertTrue(followed, "NOT_MASTER with a hint was followed; log:\n" + "\n".join(logs.output))

    def test_skips_an_unreachable_replica(self):
        master, others = master_and_others()
        with cc.Cell([free_addr(), others[0]], connect_timeout=0.5) as c, c.session() as s:
            s.create_file(unique("unr"), b"x")
            self.assertEqual(c.master_address, master)

    def test_gives_up_on_a_dead_cell_in_bounded_time(self):
        with cc.Cell([free_addr(), free_addr()], connect_timeout=0.5) as c:
            start = time.monotonic()
            with self.assertRaises(cc.UnreachableError) as cm:
                c.session()
            self.assertLess(time.monotonic() - start, 20)
            self.assertTrue(cm.exception.address)
            self.assertIsNone(cm.exception.code)


class TestExactlyOnce(unittest.TestCase):
    """A proxy in front of the master loses a reply after the cell acted;
    the client resends with the same RequestID and gets the first answer.
    One lost reply per test: after it the Cell goes on at another replica
    it has learned of, not through the proxy."""

    def setUp(self):
        master, _ = master_and_others()
        self.proxy = Proxy(master)
        self.addCleanup(self.proxy.close)
        # The Cell is given only the proxy: the first attempt of every call
        # goes through it (a resend may go to a replica the Cell has learned
        # of since; exactly-once holds on any replica).
        self.cell = cc.Cell([self.proxy.addr])
        self.addCleanup(self.cell.close)
        self.s = self.cell.session()

    def test_sequential_create_retried_names_one_file(self):
        d = unique("once")
        self.s.mkdir(d)
        self.proxy.drop_reply("CreateFile")
        st = self.s.create_file(d + "/job-", b"payload", sequential=True)
        self.assertEqual(self.proxy.dropped, ["CreateFile"], "the cell acted, its reply was lost")
        names = [e.name for e in self.s.open(d).readdir()]
        self.assertEqual(names, [st.path.rsplit("/", 1)[1]], "applied once: one file, the one returned")

    def test_create_new_open_retried_is_not_exists(self):
        p = unique("once-open")
        self.proxy.drop_reply("Open")
        h = self.s.open(p, mode=cc.OpenMode.READ_WRITE, create=cc.CreateMode.CREATE_NEW)
        self.assertEqual(self.proxy.dropped, ["Open"])
        self.assertTrue(h.created, "the resend got the first answer (created), not EXISTS")
        h.write(b"ok")

    def test_write_retried_applies_once(self):
        p = unique("once-w")
        h = self.s.open(p, mode=cc.OpenMode.READ_WRITE, create=cc.CreateMode.OPEN_OR_CREATE)
        gen = h.stat().content_generation
        self.proxy.drop_reply("SetContents")
        st = h.write(b"once")
        self.assertEqual(self.proxy.dropped, ["SetContents"])
        self.assertEqual(st.content_generation, gen + 1, "written once")
        self.assertEqual(h.stat().content_generation, gen + 1)

    def test_try_acquire_retried_is_not_lock_held(self):
        h = self.s.open(unique("once-t"), create=cc.CreateMode.OPEN_OR_CREATE)
        self.proxy.drop_reply("TryAcquire")
        seq = h.try_acquire()  # applied twice, the second would say LOCK_HELD
        self.assertEqual(self.proxy.dropped, ["TryAcquire"])
        self.assertEqual(h.sequencer(), seq)

    def test_release_retried_is_not_lock_not_held(self):
        h = self.s.open(unique("once-rel"), create=cc.CreateMode.OPEN_OR_CREATE)
        seq = h.try_acquire()
        self.proxy.drop_reply("Release")
        h.release()  # applied twice, the second would say LOCK_NOT_HELD
        self.assertEqual(self.proxy.dropped, ["Release"])
        self.assertFalse(self.cell.check_sequencer(seq)[0])

    def test_read_is_resent(self):
        h = self.s.open(unique("once-r"), mode=cc.OpenMode.READ_WRITE, create=cc.CreateMode.OPEN_OR_CREATE,
                        initial_content=b"r")
        self.proxy.drop_reply("GetContentsAndStat")
        self.assertEqual(h.read(), b"r")
        self.assertEqual(self.proxy.dropped, ["GetContentsAndStat"])

    def test_acquire_is_not_resent(self):
        # Acquire carries no RequestID: after a lost reply its fate is
        # unknown, so it is reported, not resent.
        p = unique("once-a")
        h = self.s.open(p, create=cc.CreateMode.OPEN_OR_CREATE)
        self.proxy.drop_reply("Acquire")
        with self.assertRaises(cc.TransportError) as cm:
            h.acquire(timeout=5)
        self.assertNotIsInstance(cm.exception, cc.UnreachableError)
        self.assertEqual(self.proxy.dropped, ["Acquire"])
        self.assertEqual(h.sequencer().path, p, "the cell did grant it")

    def test_request_ids_number_the_calls(self):
        # Each mutating call gets the next number; the floor is the lowest
        # still in flight (here: the call itself).
        p = unique("rid")
        h = self.s.open(p, mode=cc.OpenMode.READ_WRITE, create=cc.CreateMode.OPEN_OR_CREATE)
        first = self.s._rid_seq
        h.write(b"a")
        h.write(b"b")
        self.assertEqual(self.s._rid_seq, first + 2)
        self.assertEqual(self.s._inflight, set())


if __name__ == "__main__":
    unittest.main()
