"""Multi, timestamps, per-call deadlines and cancellation, and the asyncio
form (chubbycell.aio), against a real cell."""

import asyncio
import socket
import threading
import time
import unittest

import chubbycell as cc
from chubbycell import aio
from helpers import cell_addrs, unique


class Blackhole:
    """A loopback server that accepts connections and never answers."""

    def __init__(self):
        self._ls = socket.create_server(("127.0.0.1", 0))
        self.addr = "127.0.0.1:%d" % self._ls.getsockname()[1]
        self._conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self._ls.accept()
            except OSError:
                return
            self._conns.append(c)

    def close(self):
        self._ls.close()
        for c in self._conns:
            c.close()


class FeatureTest(unittest.TestCase):

    def setUp(self):
        self.cell = cc.Cell(cell_addrs())
        self.addCleanup(self.cell.close)
        self.s = self.cell.session(client_name="py-features")


class TestMulti(FeatureTest):

    def test_all_or_nothing(self):
        d = unique("multi")
        r = self.s.multi([cc.Compare.not_exists(d)],
                         [cc.Op.mkdir(d), cc.Op.create(d + "/a", b"A"), cc.Op.create(d + "/b", b"B")])
        self.assertTrue(r.succeeded)
        self.assertEqual([st.path for st in r.stats], [d, d + "/a", d + "/b"])
        self.assertTrue(r.stats[0].is_dir)
        gen_a = r.stats[1].content_generation
        # A compare that does not hold: an answer naming it, nothing applied.
        r = self.s.multi([cc.Compare.exists(d + "/a"), cc.Compare.generation(d + "/a", gen_a + 5)],
                         [cc.Op.set(d + "/a", b"never"), cc.Op.delete(d + "/b")])
        self.assertFalse(r.succeeded)
        self.assertFalse(r)
        self.assertEqual(r.failed_compare, 1)
        self.assertEqual(self.s.open(d + "/a").read(), b"A")
        self.assertEqual(self.s.open(d + "/b").read(), b"B")
        # An op that cannot be applied refuses the whole Multi with its error.
        with self.assertRaises(cc.ExistsError):
            self.s.multi([], [cc.Op.set(d + "/a", b"never"), cc.Op.create(d + "/b", b"again")])
        self.assertEqual(self.s.open(d + "/a").read(), b"A")
        with self.assertRaises(cc.GenerationMismatchError):
            self.s.multi([], [cc.Op.set(d + "/a", b"x", if_generation=gen_a + 1)])
        # Compare-and-swap on both files, then a delete, in one command.
        inst_b = self.s.open(d + "/b").stat().instance
        r = self.s.multi([cc.Compare.generation(d + "/a", gen_a), cc.Compare.instance(d + "/b", inst_b)],
                         [cc.Op.set(d + "/a", b"A2", if_generation=gen_a), cc.Op.delete(d + "/b"),
                          cc.Op.create(d + "/e", b"", ephemeral=True)])
        self.assertTrue(r.succeeded)
        self.assertEqual(r.stats[0].content_generation, gen_a + 1)
        self.assertEqual(self.s.open(d + "/a").read(), b"A2")
        self.assertTrue(self.s.open(d + "/e").stat().ephemeral)
        with self.assertRaises(cc.NotFoundError):
            self.s.open(d + "/b")

    def test_exactly_once_and_limits(self):
        d = unique("multi-lim")
        rid = self.s._rid_seq
        self.s.multi([], [cc.Op.mkdir(d)])
        self.assertEqual(self.s._rid_seq, rid + 1, "a Multi carries one request id")
        for bad in (lambda: self.s.multi([], [cc.Op.mkdir(d + "/x")] * (cc.MAX_MULTI_OPS + 1)),
                    lambda: self.s.multi([cc.Compare.exists(d)] * (cc.MAX_MULTI_COMPARES + 1), [cc.Op.mkdir(d)]),
                    lambda: self.s.multi([cc.Compare.exists(d)], []),
                    lambda: self.s.multi([], ["not an op"]),
                    lambda: self.s.multi(["not a compare"], [cc.Op.mkdir(d)]),
                    lambda: cc.Op.create("relative", b""),
                    lambda: cc.Op.set(d, "str"),
                    lambda: cc.Compare.generation(d, -1)):
            with self.assertRaises(cc.InvalidArgumentError):
                bad()
        big = b"x" * cc.MAX_CONTENT_BYTES
        with self.assertRaises(cc.TooLargeError):
            self.s.multi([], [cc.Op.create("%s/%d" % (d, i), big) for i in range(5)])
        self.assertEqual(self.s._rid_seq, rid + 1, "nothing was sent")


class TestTimestamps(FeatureTest):

    def test_a_range_of_all_the_numbers(self):
        seen = []
        for n in (1, 7, 1000):
            r = self.cell.get_timestamps(n)
            self.assertIsInstance(r, range)
            self.assertEqual(len(r), n)
            self.assertEqual(list(r), list(range(r[0], r[0] + n)))
            seen.extend(r)
        self.assertEqual(seen, sorted(set(seen)), "strictly increasing across calls, none twice")
        # From other threads and Cells at once: none handed out twice.
        out, mu = [], threading.Lock()

        def take():
            with cc.Cell(cell_addrs()) as c:
                for _ in range(20):
                    r = c.get_timestamps(50)
                    with mu:
                        out.extend(r)

        threads = [threading.Thread(target=take) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(len(out), 4 * 20 * 50)
        self.assertEqual(len(set(out)), len(out))
        self.assertGreater(min(out), seen[-1])
        for bad in (0, -1, cc.MAX_TIMESTAMPS_PER_CALL + 1, 1.5, True):
            with self.assertRaises(cc.InvalidArgumentError):
                self.cell.get_timestamps(bad)


class TestDeadlines(FeatureTest):

    def blackhole_cell(self):
        b = Blackhole()
        self.addCleanup(b.close)
        c = cc.Cell([b.addr], call_timeout=60.0)
        self.addCleanup(c.close)
        return c

    def test_timeout_bounds_a_call_that_gets_no_reply(self):
        c = self.blackhole_cell()
        start = time.monotonic()
        with self.assertRaises(cc.DeadlineExceededError) as e:
            c.who_am_i(timeout=0.5)
        took = time.monotonic() - start
        self.assertIsInstance(e.exception, cc.CallTimeoutError)
        self.assertGreaterEqual(took, 0.5)
        self.assertLess(took, 30, "bounded by the call's timeout, not the Cell's 60 s call_timeout")

    def test_timeout_bounds_the_retries(self):
        # Nothing listens: every attempt is refused at once, and the retries'
        # pauses would go on for seconds; the deadline ends them.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            dead = "127.0.0.1:%d" % s.getsockname()[1]
        with cc.Cell([dead]) as c:
            with self.assertRaises(cc.DeadlineExceededError):
                c.status(timeout=0.05)
            with self.assertRaises(cc.UnreachableError):
                c.status()  # without one: the attempts run out

    def test_cancel_ends_a_waiting_call(self):
        c = self.blackhole_cell()
        tok = cc.Cancel()
        threading.Timer(0.3, tok.cancel).start()
        start = time.monotonic()
        with self.assertRaises(cc.CallCancelledError):
            c.who_am_i(cancel=tok)
        self.assertLess(time.monotonic() - start, 30)
        with self.assertRaises(cc.CallCancelledError):
            self.cell.status(cancel=tok)  # a cancelled token ends later calls at once

    def test_cancel_ends_a_parked_acquire(self):
        p = unique("cancel-acq")
        holder = self.s.open(p, create=cc.CreateMode.OPEN_OR_CREATE)
        holder.acquire()
        other = cc.Cell(cell_addrs())
        self.addCleanup(other.close)
        s2 = other.session()
        h = s2.open(p)
        tok = cc.Cancel()
        threading.Timer(0.3, tok.cancel).start()
        start = time.monotonic()
        with self.assertRaises(cc.CallCancelledError):
            h.acquire(timeout=120, cancel=tok)
        self.assertLess(time.monotonic() - start, 60, "cancelled, not timed out")
        # The session and handle are still usable.
        with self.assertRaises(cc.LockHeldError):
            h.try_acquire()
        holder.release()
        self.assertEqual(h.acquire(timeout=30).path, p)

    def test_bad_arguments(self):
        for bad in (0, -1, float("nan"), float("inf"), "1", True):
            with self.assertRaises(cc.InvalidArgumentError, msg=repr(bad)):
                self.cell.status(timeout=bad)
        with self.assertRaises(cc.InvalidArgumentError):
            self.cell.status(cancel=threading.Event())


class TestAsyncio(unittest.TestCase):

    def test_calls_locks_events_and_cancellation(self):
        asyncio.run(self._main())

    async def _main(self):
        d = unique("aio")
        async with aio.AsyncCell(cell_addrs()) as cell:
            self.assertEqual(await cell.who_am_i(), ("anonymous", False))
            self.assertEqual(len(await cell.get_timestamps(10)), 10)
            async with await cell.session() as s:
                await s.mkdir(d)
                dh = await s.open(d, event_mask=cc.EVENT_MASK_CHILD_ADDED)
                h = await s.open(d + "/f", mode=cc.OpenMode.READ_WRITE, create=cc.CreateMode.OPEN_OR_CREATE)
                await h.write(b"v1")
                self.assertEqual(await h.read(), b"v1")
                ev = await asyncio.wait_for(dh.events().__anext__(), 30)
                self.assertEqual((ev.kind, ev.child), (cc.EventKind.CHILD_ADDED, "f"))
                r = await s.multi([cc.Compare.exists(d + "/f")], [cc.Op.create(d + "/g", b"")])
                self.assertTrue(r.succeeded)
                # Many calls at once, each on a pool thread.
                reads = await asyncio.gather(*[h.read() for _ in range(20)])
                self.assertEqual(reads, [b"v1"] * 20)
                async with s.lock(d + "/lock") as held:
                    self.assertTrue((await cell.check_sequencer(held.sequencer))[0])
                    # Another session's acquire waits; wait_for cancels it.
                    async with await cell.session() as s2:
                        h2 = await s2.open(d + "/lock")
                        start = time.monotonic()
                        with self.assertRaises(asyncio.TimeoutError):
                            await asyncio.wait_for(h2.acquire(timeout=120), 0.5)
                        self.assertLess(time.monotonic() - start, 60)
                        with self.assertRaises(cc.LockHeldError):
                            await h2.try_acquire()
                # Released on exit: the other session could take it now.
                self.assertEqual((await (await s.open(d + "/lock")).stat()).lock.holders, 0)


if __name__ == "__main__":
    unittest.main()
