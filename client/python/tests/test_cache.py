"""The session cache against a real cell: hits, and never a stale read —
another session's change is seen by a caching reader as soon as the change
has returned, because the master invalidates the reader's copy (and waits
for its KeepAlive to acknowledge it) before the change commits."""

import unittest

import chubbycell as cc
from helpers import cell_addrs, unique


class CacheTest(unittest.TestCase):

    def setUp(self):
        self.cell = cc.Cell(cell_addrs())
        self.addCleanup(self.cell.close)
        self.reader = self.cell.session(client_name="py-cache-reader")
        w = cc.Cell(cell_addrs())
        self.addCleanup(w.close)
        self.writer = w.session(client_name="py-cache-writer")

    def test_hits_and_no_stale_contents(self):
        p = unique("cache")
        self.writer.create_file(p, b"v0")
        wh = self.writer.open(p, mode=cc.OpenMode.READ_WRITE)
        rh = self.reader.open(p)
        self.assertEqual(rh.read(), b"v0")
        before = self.reader.cache_stats()
        for _ in range(5):
            self.assertEqual(rh.read(), b"v0")
        after = self.reader.cache_stats()
        self.assertEqual(after.hits - before.hits, 5, "served from the cache")
        self.assertGreaterEqual(after.entries, 1)
        for i in range(1, 21):
            st = wh.write(b"v%d" % i)
            data, rst = rh.read_with_stat()
            self.assertEqual(data, b"v%d" % i, "a read after the write returned sees it")
            self.assertEqual(rst.content_generation, st.content_generation)
            self.assertEqual(rh.stat().content_generation, st.content_generation)
            rh.read()  # cached again for the next round
        self.assertGreater(self.reader.cache_stats().invalidations, 0)
        # Lock state is in the Stat, and invalidated too.
        wh.acquire()
        self.assertEqual(rh.stat().lock.holders, 1)
        wh.release()
        self.assertEqual(rh.stat().lock.holders, 0)
        # A deleted node is not served from the cache.
        wh.delete()
        with self.assertRaises(cc.HandleInvalidError):
            rh.read()

    def test_listings(self):
        d = unique("cache-dir")
        self.writer.mkdir(d)
        self.writer.create_file(d + "/a", b"")
        dh = self.reader.open(d)
        self.assertEqual([e.name for e in dh.readdir()], ["a"])
        hits = self.reader.cache_stats().hits
        self.assertEqual([e.name for e in dh.readdir()], ["a"])
        self.assertEqual(self.reader.cache_stats().hits, hits + 1)
        self.writer.create_file(d + "/b", b"")
        self.assertEqual([e.name for e in dh.readdir()], ["a", "b"])
        self.writer.multi([], [cc.Op.delete(d + "/a"), cc.Op.create(d + "/c", b"")])
        self.assertEqual([e.name for e in dh.readdir()], ["b", "c"])

    def test_own_writes_and_closed_handles(self):
        p = unique("cache-own")
        h = self.reader.open(p, mode=cc.OpenMode.READ_WRITE, create=cc.CreateMode.OPEN_OR_CREATE)
        h.write(b"a")
        self.assertEqual(h.read(), b"a")
        h.write(b"b")
        self.assertEqual(h.read(), b"b")
        r = self.reader.multi([], [cc.Op.set(p, b"c")])
        self.assertEqual(h.read(), b"c")
        self.assertEqual(h.stat().content_generation, r.stats[0].content_generation)
        h.close()
        with self.assertRaises(cc.HandleInvalidError):
            h.read()  # not from the cache: the handle is closed

    def test_off(self):
        s = self.cell.session(cache=False)
        p = unique("cache-off")
        s.create_file(p, b"x")
        h = s.open(p)
        for _ in range(3):
            self.assertEqual(h.read(), b"x")
        st = s.cache_stats()
        self.assertEqual((st.hits, st.entries), (0, 0))
        for bad in ("yes", 1):
            with self.assertRaises(cc.InvalidArgumentError):
                self.cell.session(cache=bad)
        with self.assertRaises(cc.InvalidArgumentError):
            self.cell.session(cache_max_entries=0)


if __name__ == "__main__":
    unittest.main()
