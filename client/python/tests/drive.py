"""Scenarios a Go test drives (client/python/python_test.go), talking by
lines: this script prints what it has done, the Go side does what only it
can (stop a master, restart a cell) and says so on stdin.

usage: drive.py failover|restart|remove ID   (the cell in CHUBBY_CELL)

failover (a 3-replica cell whose failover outlasts the session lease):
  hold a session, a lock and a handle watching a file; print "LOCKED
  <sequencer>"; on "STOPPED" (the Go side stopped the master) write (the
  call finds no master, waits through the jeopardy and is sent again),
  wait for jeopardy, master-changed and safe in that order, and check that
  the session never expired, kept its lock (its handle's sequencer is the
  same, the cell says it is valid, another session cannot take it) and
  goes on working (the write, its event, another write), and that a file
  it cached before the failover is read anew after another session changed
  it under the new master; print "OK ...";
  on "DONE" (the Go side checked the lock too) close the session.
restart (a one-replica cell): the same lock; print "LOCKED"; once the Go
  side stopped the cell, wait for jeopardy (a read with timeout= raises
  DeadlineExceededError; a write made now waits) and print "JEOPARDY"; on
  "RESTARTED" (a new master on the same data) wait for safe (after
  master-changed), check the lock and the waiting write; print "OK".
remove ID (a 3-replica cell whose replica ID the Go side stopped): remove
  it from the configuration (retried while the master answers
  UNAVAILABLE), check that the Cell's replica list follows, that removing
  it again is NOT_FOUND and a malformed id INVALID_ARGUMENT, and that the
  cell goes on working; print "OK <index>".

Every wait is bounded; any failure raises, which prints a traceback and
exits non-zero.
"""

import queue
import select
import sys
import threading
import time

import chubbycell as cc


def say(*words):
    print(*words, flush=True)


def read_line(timeout):
    """A line from stdin within timeout seconds."""
    r, _, _ = select.select([sys.stdin], [], [], timeout)
    if not r:
        raise AssertionError("nothing on stdin within %gs" % timeout)
    return sys.stdin.readline().strip()


class Watch:
    """The session's state callbacks, in order."""

    def __init__(self):
        self.q = queue.Queue()
        self.log = []

    def kw(self):
        return dict(on_jeopardy=lambda s: self._put("jeopardy"), on_safe=lambda s: self._put("safe"),
                    on_expired=lambda s, e: self._put("expired"),
                    on_master_changed=lambda s, e: self._put("master-changed"))

    def _put(self, what):
        self.log.append(what)
        self.q.put(what)

    def wait_for(self, what, timeout):
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("no %s within %gs; saw %s" % (what, timeout, self.log))
            try:
                got = self.q.get(timeout=left)
            except queue.Empty:
                continue
            if got == "expired":
                raise AssertionError("the session expired; saw %s" % self.log)
            if got == what:
                return


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def keeps_lock(cell, s, h, seq, path):
    check(s.state == cc.SessionState.SAFE and s.error is None, "session safe: %s %s" % (s.state, s.error))
    check(h.sequencer() == seq, "the handle still holds the lock with the same sequencer")
    valid, reason = cell.check_sequencer(seq)
    check(valid, "the cell says the sequencer is valid: %s" % reason)
    with cc.Cell() as c2, c2.session() as other:
        try:
            other.open(path).try_acquire()
        except cc.LockHeldError:
            pass
        else:
            raise AssertionError("another session took the lock")


def failover():
    w = Watch()
    cell = cc.Cell()
    s = cell.session(**w.kw())
    path = "/failover-lock"
    h = s.open(path, create=cc.CreateMode.OPEN_OR_CREATE)
    seq = h.try_acquire()
    data = s.open("/failover-data", mode=cc.OpenMode.READ_WRITE, create=cc.CreateMode.OPEN_OR_CREATE,
                  event_mask=cc.EVENT_MASK_FILE_CONTENTS_MODIFIED)
    cached = s.open("/failover-cached", mode=cc.OpenMode.READ_WRITE, create=cc.CreateMode.OPEN_OR_CREATE)
    cached.write(b"before the failover")
    hits = s.cache_stats().hits
    check(cached.read() == b"before the failover" and cached.read() == b"before the failover", "cached")
    check(s.cache_stats().hits > hits, "served from the cache before the failover")
    epoch0 = s.epoch
    say("LOCKED", seq)
    check(read_line(60).startswith("STOPPED"), "expected STOPPED")
    st = data.write(b"after the failover")  # waits while in jeopardy, then goes to the new master
    deadline = time.monotonic() + 30
    while s.epoch <= epoch0 or s.state != cc.SessionState.SAFE:
        check(time.monotonic() < deadline, "no new epoch and safe session within 30s: epoch %d, %s, %s"
              % (s.epoch, s.state, w.log))
        time.sleep(0.05)
    check("expired" not in w.log, "never expired: %s" % w.log)
    i = w.log.index("jeopardy") if "jeopardy" in w.log else -1
    check(i >= 0 and w.log[i:i + 3] == ["jeopardy", "master-changed", "safe"],
          "jeopardy, then master-changed, then safe: %s" % w.log)
    check(w.log.count("jeopardy") == w.log.count("safe"), "every jeopardy ended by a safe: %s" % w.log)
    keeps_lock(cell, s, h, seq, path)
    ev = next((e for e in data.events(timeout=10) if e.content_generation == st.content_generation), None)
    check(ev is not None, "the write's event arrived from the new master")
    st2 = data.write(b"and more")
    check(st2.content_generation == st.content_generation + 1, "writes go on")
    with cc.Cell() as c2, c2.session() as other:
        other.open("/failover-cached", mode=cc.OpenMode.READ_WRITE).write(b"changed after the failover")
    check(cached.read() == b"changed after the failover", "no stale cached read after the failover")
    say("OK epoch %d->%d events %s" % (epoch0, s.epoch, w.log))
    check(read_line(60).startswith("DONE"), "expected DONE")
    s.close()
    cell.close()


def restart():
    w = Watch()
    cell = cc.Cell()
    s = cell.session(**w.kw())
    path = "/restart-lock"
    h = s.open(path, mode=cc.OpenMode.READ_WRITE, create=cc.CreateMode.OPEN_OR_CREATE)
    seq = h.try_acquire()
    say("LOCKED", seq)
    w.wait_for("jeopardy", 20)  # the Go side stops the cell now
    check(s.state == cc.SessionState.JEOPARDY, "state %s in jeopardy" % s.state)
    check(s.lease_remaining() == 0, "no lease left in jeopardy")
    t0 = time.monotonic()
    try:
        h.stat(timeout=0.5)
    except cc.DeadlineExceededError:
        pass
    else:
        raise AssertionError("a read in jeopardy with timeout=0.5 succeeded")
    check(time.monotonic() - t0 < 10, "the timeout ended the wait in jeopardy, not the grace period")
    result = []
    writer = threading.Thread(target=lambda: result.append(h.write(b"written in jeopardy")))
    writer.start()
    time.sleep(0.3)
    check(writer.is_alive(), "a call made in jeopardy waits")
    say("JEOPARDY")
    check(read_line(60).startswith("RESTARTED"), "expected RESTARTED")
    w.wait_for("safe", 30)
    i = w.log.index("jeopardy")
    check(w.log[i:i + 3] == ["jeopardy", "master-changed", "safe"],
          "jeopardy, then master-changed, then safe: %s" % w.log)
    writer.join(30)
    check(result and result[0].size == len(b"written in jeopardy"), "the waiting write succeeded")
    check(h.read() == b"written in jeopardy", "and it is there")
    keeps_lock(cell, s, h, seq, path)
    say("OK events %s" % w.log)
    s.close()
    cell.close()


def remove(rid):
    with cc.Cell() as cell, cell.session() as s:
        cell.get_master()
        before = sorted(cell.replicas)
        check(len(before) == 3, "three replicas known: %s" % before)
        deadline = time.monotonic() + 30
        while True:
            try:
                index = cell.remove_member(rid, timeout=10)
                break
            except cc.UnavailableError as e:
                check(time.monotonic() < deadline and not e.message.startswith("outcome unknown"),
                      "remove_member(%s): %s" % (rid, e))
                time.sleep(0.1)
        check(index > 0, "the change's log index %d" % index)
        deadline = time.monotonic() + 30
        while len(cell.replicas) != 2:
            check(time.monotonic() < deadline, "the replica list still %s" % cell.replicas)
            cell.get_master()
            time.sleep(0.1)
        try:
            cell.remove_member(rid)
        except cc.NotFoundError:
            pass
        else:
            raise AssertionError("removing a removed replica succeeded")
        try:
            cell.remove_member("x")
        except cc.InvalidArgumentError:
            pass
        else:
            raise AssertionError("removing a malformed id succeeded")
        s.create_file("/after-remove", b"ok")
        say("OK %d %s" % (index, ",".join(sorted(cell.replicas))))


if __name__ == "__main__":
    if sys.argv[1] == "remove":
        remove(sys.argv[2])
    else:
        {"failover": failover, "restart": restart}[sys.argv[1]]()
