"""examples/lock.py holds a lock while its command runs."""

import os
import unittest

import chubbycell as cc
from helpers import ROOT, Child, cell_addrs, unique

LOCK_PY = os.path.join(ROOT, "examples", "lock.py")


class TestLockExample(unittest.TestCase):

    def setUp(self):
        self.cell = cc.Cell(cell_addrs())
        self.addCleanup(self.cell.close)
        self.s = self.cell.session()

    def run_lock(self, *args, env=None):
        c = Child([LOCK_PY, "--cell", ",".join(cell_addrs())] + list(args), env=env)
        self.addCleanup(c.stop)
        return c

    def test_holds_the_lock_while_the_command_runs(self):
        p = unique("ex")
        c = self.run_lock(p, "--", "sh", "-c", 'echo "seq=$CHUBBY_SEQUENCER"; read line; exit 3')
        seq = cc.Sequencer.parse(c.expect("seq=", 30)[len("seq="):])
        self.assertEqual((seq.path, seq.mode), (p, cc.LockMode.EXCLUSIVE))
        h = self.s.open(p)
        with self.assertRaises(cc.LockHeldError):
            h.try_acquire()
        self.assertTrue(self.cell.check_sequencer(seq)[0])
        c.send("done")
        self.assertEqual(c.wait(30), 3, "the command's exit status")
        self.assertFalse(self.cell.check_sequencer(seq)[0], "released when the command ended")
        h.try_acquire()

    def test_timeout_and_usage(self):
        p = unique("ex-to")
        h = self.s.open(p, create=cc.CreateMode.OPEN_OR_CREATE)
        h.try_acquire()
        c = self.run_lock("--timeout", "0.3", p, "--", "true")
        self.assertEqual(c.wait(30), 1)
        self.assertIn("not granted", "\n".join(c.output))
        h.release()
        self.assertEqual(self.run_lock("--shared", p, "--", "sh", "-c", "exit 0").wait(30), 0)
        self.assertEqual(self.run_lock(p, "--", "/nonexistent/command").wait(30), 127)
        self.assertEqual(self.run_lock("not/absolute", "--", "true").wait(30), 2)
        self.assertEqual(self.run_lock(p).wait(30), 2)
        # Not installed and no PYTHONPATH: it finds the package beside it.
        self.assertEqual(self.run_lock(p, "--", "true", env={"PYTHONPATH": ""}).wait(30), 0)


if __name__ == "__main__":
    unittest.main()
