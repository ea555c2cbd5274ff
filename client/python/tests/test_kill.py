"""A lock held by a process killed with SIGKILL is released once its
session expires at the cell (nobody closes it: the KeepAlives stop)."""

import os
import unittest

import chubbycell as cc
from helpers import HERE, Child, cell_addrs, unique, wait_until


class TestKilledHolder(unittest.TestCase):

    def setUp(self):
        self.cell = cc.Cell(cell_addrs())
        self.addCleanup(self.cell.close)

    def test_lock_of_a_killed_process_is_released_after_its_session_expires(self):
        p = unique("kill")
        child = Child([os.path.join(HERE, "hold_lock.py"), p, "0"])
        self.addCleanup(child.stop)
        _, text, sid = child.expect("LOCKED ", 30).split()
        seq = cc.Sequencer.parse(text)
        self.assertEqual(seq.path, p)

        s = self.cell.session()
        h = s.open(p)
        with self.assertRaises(cc.LockHeldError):
            h.try_acquire()
        self.assertEqual(self.cell.check_sequencer(seq), (True, ""))
        st = h.stat()
        self.assertEqual((st.lock.holders, st.lock.mode), (1, cc.LockMode.EXCLUSIVE))
        s.open(p + "-eph")  # the holder's ephemeral file exists

        child.kill()  # SIGKILL: no CloseSession, no Release

        def take():
            try:
                return h.try_acquire()
            except cc.LockHeldError:
                return None

        # The test cell's lease is 5 s (python_test.go, suiteLease); the lock has no lock-delay.
        got = wait_until(take, 30, interval=0.1, what="the dead holder's lock free")
        self.assertGreater(got.lock_generation, seq.lock_generation)
        valid, reason = self.cell.check_sequencer(seq)
        self.assertFalse(valid)
        self.assertTrue(reason)
        with self.assertRaises(cc.NotFoundError):
            s.open(p + "-eph")  # the expired session's ephemeral file went with it
        self.assertNotEqual(int(sid), s.id)


if __name__ == "__main__":
    unittest.main()
