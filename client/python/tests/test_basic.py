"""Files, locks, events, errors and validation against a real cell."""

import threading
import time
import unittest

import chubbycell as cc
from helpers import cell_addrs, unique, wait_until


class CellTest(unittest.TestCase):
    """A Cell and a session per test, closed afterwards."""

    def setUp(self):
        self.cell = cc.Cell(cell_addrs())
        self.addCleanup(self.cell.close)
        self.s = self.cell.session(client_name="py-test")

    def other(self):
        """A second session, on its own Cell."""
        c = cc.Cell(cell_addrs())
        self.addCleanup(c.close)
        return c.session()


class TestFiles(CellTest):

    def test_create_write_read_stat_delete(self):
        d = unique("files")
        st = self.s.mkdir(d)
        self.assertTrue(st.is_dir)
        h = self.s.open(d + "/f", mode=cc.OpenMode.READ_WRITE, create=cc.CreateMode.CREATE_NEW,
                        initial_content=b"first")
        self.assertTrue(h.created)
        self.assertEqual(h.read(), b"first")
        st = h.write(b"second")
        self.assertEqual(st.size, 6)
        data, st2 = h.read_with_stat()
        self.assertEqual(data, b"second")
        self.assertEqual(st2.content_generation, st.content_generation)
        self.assertEqual(h.stat().content_generation, st.content_generation)
        self.s.create_file(d + "/a", b"x")
        dh = self.s.open(d)
        self.assertEqual([e.name for e in dh.readdir()], ["a", "f"])
        for n in ("b", "c", "d"):
            self.s.create_file(d + "/" + n, b"")
        dh._readdir_limit = 2  # five children in three pages
        self.assertEqual([e.name for e in dh.readdir()], ["a", "b", "c", "d", "f"])
        for n in ("b", "c", "d"):
            self.s.open(d + "/" + n, mode=cc.OpenMode.READ_WRITE).delete()
        with self.assertRaises(cc.ExistsError):
            self.s.open(d + "/f", create=cc.CreateMode.CREATE_NEW)
        dw = self.s.open(d, mode=cc.OpenMode.READ_WRITE)
        with self.assertRaises(cc.NotEmptyError):
            dw.delete()
        h.delete()
        with self.assertRaises(cc.HandleInvalidError):
            h.read()
        with self.assertRaises(cc.NotFoundError):
            self.s.open(d + "/f")
        dw.delete(recursive=True)
        with self.assertRaises(cc.NotFoundError) as cm:
            self.s.open(d)
        self.assertEqual(cm.exception.code, cc.ErrorCode.NOT_FOUND)
        self.assertEqual(cm.exception.path, d)

    def test_compare_and_swap(self):
        p = unique("cas")
        h = self.s.open(p, mode=cc.OpenMode.READ_WRITE, create=cc.CreateMode.OPEN_OR_CREATE)
        gen = h.write(b"v1").content_generation
        h.write(b"v2", if_generation=gen)
        with self.assertRaises(cc.GenerationMismatchError):
            h.write(b"v3", if_generation=gen)
        self.assertEqual(h.read(), b"v2")

    def test_read_only_handle_cannot_write(self):
        p = unique("ro")
        self.s.create_file(p, b"keep")
        h = self.s.open(p)
        with self.assertRaises(cc.PermissionDeniedError):
            h.write(b"no")
        self.assertEqual(h.read(), b"keep")

    def test_ephemeral_and_sequential(self):
        d = unique("eph")
        self.s.mkdir(d)
        other = self.other()
        a = other.create_file(d + "/job-", b"", sequential=True, ephemeral=True)
        b = other.create_file(d + "/job-", b"", sequential=True)
        self.assertRegex(a.path, r"/job-\d{10}$")
        self.assertNotEqual(a.path, b.path)
        self.assertTrue(a.ephemeral)
        other.close()
        self.assertEqual(other.state, cc.SessionState.CLOSED)
        names = [e.name for e in self.s.open(d).readdir()]
        self.assertEqual(names, [b.path.rsplit("/", 1)[1]], "the closed session's ephemeral file is gone")

    def test_closed_session_refuses_calls(self):
        p = unique("closed")
        h = self.s.open(p, create=cc.CreateMode.OPEN_OR_CREATE)
        self.s.close()
        with self.assertRaises(cc.SessionClosedError):
            h.read()
        with self.assertRaises(cc.SessionClosedError):
            self.s.open(p)
        self.s.close()  # again: nothing

    def test_buffered_transport(self):
        with cc.Cell(cell_addrs(), transport="buffered") as c, c.session() as s:
            p = unique("buf")
            h = s.open(p, mode=cc.OpenMode.READ_WRITE, create=cc.CreateMode.OPEN_OR_CREATE)
            h.write(b"buffered")
            self.assertEqual(h.read(), b"buffered")
            # The session lives through more than one KeepAlive.
            n = s._ll.renewals
            wait_until(lambda: s._ll.renewals > n + 1, 10, what="two more renewals")
            self.assertEqual(s.state, cc.SessionState.SAFE)


class TestLocks(CellTest):

    def test_exclusive_and_shared(self):
        p = unique("lock")
        h = self.s.open(p, create=cc.CreateMode.OPEN_OR_CREATE)
        seq = h.try_acquire()
        self.assertEqual(seq.mode, cc.LockMode.EXCLUSIVE)
        self.assertEqual(h.sequencer(), seq)
        self.assertEqual(self.cell.check_sequencer(seq), (True, ""))
        with self.assertRaises(cc.LockHeldError):
            h.try_acquire()  # already held by this handle
        other = self.other()
        oh = other.open(p)
        with self.assertRaises(cc.LockHeldError):
            oh.try_acquire(shared=True)
        h.release()
        valid, reason = self.cell.check_sequencer(str(seq))
        self.assertFalse(valid)
        self.assertTrue(reason)
        with self.assertRaises(cc.LockNotHeldError):
            h.release()
        s1 = oh.try_acquire(shared=True)
        s2 = h.try_acquire(shared=True)
        self.assertEqual((s1.mode, s2.mode), (cc.LockMode.SHARED, cc.LockMode.SHARED))
        self.assertEqual(s1.lock_generation, s2.lock_generation)
        self.assertEqual(h.stat().lock.holders, 2)
        third = self.s.open(p)
        with self.assertRaises(cc.LockHeldError):
            third.try_acquire()

    def test_lock_context_manager(self):
        p = unique("ctx")
        other = self.other()
        with self.s.lock(p) as held:
            self.assertEqual(held.path, p)
            self.assertTrue(self.cell.check_sequencer(held.sequencer)[0])
            with self.assertRaises(cc.LockHeldError):
                other.open(p).try_acquire()
        self.assertFalse(self.cell.check_sequencer(held.sequencer)[0], "released on exit")
        with self.assertRaises(RuntimeError):
            with self.s.lock(p, shared=True) as held2:
                self.assertEqual(held2.sequencer.mode, cc.LockMode.SHARED)
                raise RuntimeError("body failed")
        self.assertFalse(self.cell.check_sequencer(held2.sequencer)[0], "released when the body raised")
        oh = other.open(p)
        oh.try_acquire()
        oh.release()

    def test_acquire_waits_then_times_out_or_is_granted(self):
        p = unique("wait")
        other = self.other()
        oh = other.open(p, create=cc.CreateMode.OPEN_OR_CREATE)
        oh.try_acquire()
        h = self.s.open(p)
        start = time.monotonic()
        with self.assertRaises(cc.TimedOutError):
            h.acquire(timeout=0.3)
        self.assertGreaterEqual(time.monotonic() - start, 0.25)
        got = []
        t = threading.Thread(target=lambda: got.append(h.acquire(timeout=20)))
        t.start()
        wait_until(lambda: oh.stat().lock.waiters == 1, 10, what="a waiter")
        oh.release()
        t.join(20)
        self.assertEqual(len(got), 1)
        self.assertEqual(h.sequencer(), got[0])
        with self.assertRaises(cc.TimedOutError):
            with self.s.lock(p, timeout=0.2):
                pass  # held by h in this very session: another handle waits

    def test_sequencer_printable_form(self):
        seq = cc.Sequencer(path="/a/b", mode=cc.LockMode.SHARED, lock_generation=7, instance=12)
        self.assertEqual(str(seq), "chubby-seq:v1:S:7:12:/a/b")
        self.assertEqual(cc.Sequencer.parse(str(seq)), seq)
        for bad in ("", "chubby-seq:v1:X:1:1:/a", "chubby-seq:v1:E:01:1:/a", "chubby-seq:v1:E:1:-1:/a",
                    "chubby-seq:v1:E:1:1:a", "chubby-seq:v1:E:1:1:/a:b", "chubby-seq:v1:E:1:1",
                    "chubby-seq:v2:E:1:1:/a", "chubby-seq:v1:E:9223372036854775808:1:/a"):
            with self.assertRaises(cc.InvalidArgumentError, msg=bad):
                cc.Sequencer.parse(bad)


class TestEvents(CellTest):

    def test_events_in_order_once_and_acknowledged(self):
        p = unique("ev")
        w = self.s.open(p, mode=cc.OpenMode.READ_WRITE, create=cc.CreateMode.OPEN_OR_CREATE)
        other = self.other()
        h = other.open(p, event_mask=cc.EVENT_MASK_FILE_CONTENTS_MODIFIED)
        gens = [w.write(b"%d" % i).content_generation for i in range(5)]
        evs = []
        for ev in h.events(timeout=10):
            evs.append(ev)
            if len(evs) == 5:
                break
        self.assertEqual([e.kind for e in evs], [cc.EventKind.FILE_CONTENTS_MODIFIED] * 5)
        self.assertEqual([e.content_generation for e in evs], gens)
        seqs = [e.seq for e in evs]
        self.assertEqual(seqs, list(range(seqs[0], seqs[0] + 5)), "consecutive, no repeats")
        # Acknowledged on the next KeepAlive: the master then parks the
        # KeepAlives again. A client that did not acknowledge would be
        # answered at once, over and over (hundreds of renewals a second).
        wait_until(lambda: other._last_event == seqs[-1], 5, what="events recorded")
        time.sleep(0.3)
        before = other._ll.renewals
        time.sleep(1.5)
        self.assertLess(other._ll.renewals - before, 10, "KeepAlives parked again after the acks")
        self.assertEqual(list(h.events(timeout=0.2)), [], "nothing delivered twice")

    def test_callback_and_handle_invalid(self):
        d = unique("evdir")
        self.s.mkdir(d)
        got = []
        done = threading.Event()

        def on_event(ev):
            got.append((ev.kind, ev.child))
            if ev.kind == cc.EventKind.HANDLE_INVALID:
                done.set()

        other = self.other()
        other.open(d, event_mask=cc.EVENT_MASK_ALL, on_event=on_event)
        self.s.create_file(d + "/c1", b"")
        self.s.open(d + "/c1", mode=cc.OpenMode.READ_WRITE).delete()
        self.s.open(d, mode=cc.OpenMode.READ_WRITE).delete()
        self.assertTrue(done.wait(10), got)
        self.assertEqual(got, [(cc.EventKind.CHILD_ADDED, "c1"), (cc.EventKind.CHILD_REMOVED, "c1"),
                               (cc.EventKind.HANDLE_INVALID, None)])

    def test_iteration_ends_with_the_handle(self):
        p = unique("evend")
        h = self.s.open(p, create=cc.CreateMode.OPEN_OR_CREATE, event_mask=cc.EVENT_MASK_ALL)
        out = []
        t = threading.Thread(target=lambda: out.extend(h.events()))
        t.start()
        time.sleep(0.2)
        h.close()
        t.join(5)
        self.assertFalse(t.is_alive(), "events() ended when the handle closed")
        self.assertEqual(list(self.s.open(p).events()), [], "no mask: no events")


class TestThreads(CellTest):

    def test_one_session_many_threads(self):
        d = unique("threads")
        self.s.mkdir(d)
        first = self.s._rid_seq
        errs, stats = [], []

        def work(i):
            try:
                for j in range(10):
                    st = self.s.create_file("%s/f-%d-%d" % (d, i, j), b"%d" % j)
                    h = self.s.open(st.path, mode=cc.OpenMode.READ_WRITE)
                    h.write(b"w%d" % j)
                    stats.append((st.path, h.read()))
                    h.close()
            except Exception as e:  # reported below
                errs.append(e)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(errs, [])
        self.assertEqual(len(stats), 80)
        self.assertTrue(all(data == b"w" + p.rsplit("-", 1)[1].encode() for p, data in stats))
        # Each mutating call (create, open, write, close) took one request number.
        self.assertEqual(self.s._rid_seq - first, 80 * 4)
        self.assertEqual(self.s._inflight, set())
        self.assertEqual(len(self.s.open(d).readdir()), 80)


class TestCellCalls(CellTest):

    def test_status_master_whoami_timestamps(self):
        st = self.cell.status()
        info = self.cell.get_master()
        self.assertEqual(st.master_address, info.address)
        self.assertIn(info.address, cell_addrs())
        self.assertEqual(sorted(info.replicas), sorted(cell_addrs()))
        self.assertGreaterEqual(st.sessions, 1)
        self.assertEqual(self.cell.who_am_i(), ("anonymous", False))
        a = self.cell.get_timestamps(3)
        b = self.cell.get_timestamps(1)
        self.assertEqual(len(a), 3)
        self.assertGreater(b[0], a[-1])

    def test_learns_the_replicas_from_one(self):
        with cc.Cell(cell_addrs()[:1]) as c:
            c.get_master()
            self.assertEqual(sorted(c.replicas), sorted(cell_addrs()))


class TestValidation(CellTest):
    """Bad input raises a typed error before anything is sent, and changes nothing."""

    def test_cell_arguments(self):
        for bad in ("", "nohost", "h:0", "h:65536", "h:x", ":80", "a b:1", "h:1,h:1", "::1:80", ["h:1", 5]):
            with self.assertRaises(cc.InvalidArgumentError, msg=repr(bad)):
                cc.Cell(bad)
        self.assertTrue(issubclass(cc.InvalidArgumentError, ValueError))
        cc.Cell("[::1]:7000,localhost:7001")
        with self.assertRaises(cc.InvalidArgumentError):
            cc.Cell(cell_addrs(), transport="http")
        with self.assertRaises(cc.InvalidArgumentError):
            cc.Cell(cell_addrs(), call_timeout=0)
        with self.assertRaises(cc.InvalidArgumentError):
            self.cell.session(client_name="x" * 257)
        with self.assertRaises(cc.InvalidArgumentError):
            self.cell.session(grace_period=float("nan"))
        with self.assertRaises(cc.InvalidArgumentError):
            self.cell.get_timestamps(0)

    def test_paths_contents_and_options(self):
        d = unique("valid")
        self.s.mkdir(d)
        for bad in ("", "rel", "/a//b", "/a/", "/a/./b", "/a/../b", "/a b", "/" + "x" * 256, None, b"/a"):
            with self.assertRaises(cc.InvalidArgumentError, msg=repr(bad)):
                self.s.open(bad, create=cc.CreateMode.OPEN_OR_CREATE)
        h = self.s.open(d + "/f", mode=cc.OpenMode.READ_WRITE, create=cc.CreateMode.CREATE_NEW,
                        initial_content=b"orig")
        with self.assertRaises(cc.InvalidArgumentError):
            h.write("a str")
        with self.assertRaises(cc.TooLargeError):
            h.write(b"x" * (cc.MAX_CONTENT_BYTES + 1))
        with self.assertRaises(cc.InvalidArgumentError):
            h.write(b"y", if_generation=-1)
        with self.assertRaises(cc.InvalidArgumentError):
            h.try_acquire(lock_delay=61)
        with self.assertRaises(cc.InvalidArgumentError):
            h.acquire(timeout=0)
        with self.assertRaises(cc.InvalidArgumentError):
            h.acquire(shared="yes")
        with self.assertRaises(cc.InvalidArgumentError):
            h.delete(recursive=1)
        self.assertEqual(h.read(), b"orig")
        self.assertEqual(h.stat().lock.holders, 0)
        for bad in (dict(event_mask=128), dict(event_mask=-1), dict(mode=3), dict(create=0),
                    dict(ephemeral=None), dict(initial_content="s"), dict(on_event=5)):
            kw = dict(dict(create=cc.CreateMode.OPEN_OR_CREATE), **bad)
            with self.assertRaises(cc.InvalidArgumentError, msg=repr(bad)):
                self.s.open(d + "/new", **kw)
        self.assertEqual([e.name for e in self.s.open(d).readdir()], ["f"], "nothing was created")
        with self.assertRaises(cc.InvalidArgumentError):
            self.cell.check_sequencer("chubby-seq:v1:E:1:1:nope")


if __name__ == "__main__":
    unittest.main()
