"""Which replica the client believes is the master, and the addresses of
the cell's replicas — the Go client's rules (client/master.go), in threads:

- Every call goes to the master guess.
- NOT_MASTER with a usable hint (master_address: well-formed, not the
  replica that answered, not the master this client just failed to reach)
  moves the guess there. NOT_MASTER without one, or a replica that cannot
  be reached, moves it to the next known replica and, with more than one
  address to ask, a locate round asks every known replica GetMaster at
  once (each bounded by the connect timeout + 1 s): the answer naming the
  highest epoch wins. Rounds are shared: concurrent calls and sessions wait
  for the one in progress.
- The known replicas follow the cell's configuration: they start as the
  configured addresses (the seeds); a GetMaster answer naming the
  configuration's members (a locate round's best one, Cell.get_master's,
  and a refresh every 30 s while the Cell is used) replaces them, keeping
  the replica that answered and the master it named. Entries that are not
  host:port, are longer than 512 bytes or repeat are dropped, and at most
  MAX_REPLICAS are kept, so a broken replica cannot make the client ask
  more. A round in which no known replica named a master (none answered,
  or all refused, as replicas removed from the cell do) asks the seeds it
  did not ask.
"""

import logging
import threading
import time

from . import _wire
from .errors import ChubbyError
from .types import validate_addr

log = logging.getLogger("chubbycell")

#: Replica addresses kept from the cell's answers.
MAX_REPLICAS = 16
#: How often a Cell in use asks the master for the configuration's members.
REFRESH_INTERVAL = 30.0
#: Bound on one replica's GetMaster answer once connected.
LOCATE_REPLY_TIMEOUT = 1.0


def usable_addr(a):
    """True for a well-formed host:port address from an answer."""
    if not isinstance(a, str) or not a:
        return False
    try:
        validate_addr(a)
    except ChubbyError:
        return False
    return True


class Master:
    """The master guess and the known replicas of one Cell. Thread-safe."""

    def __init__(self, seeds, ask, connect_timeout):
        """seeds: validated addresses; ask(addr, suspect, timeout) returns
        (master_address, epoch, replicas) or raises."""
        self.seeds = list(seeds)
        self._ask = ask
        self._timeout = connect_timeout + LOCATE_REPLY_TIMEOUT
        self._mu = threading.Lock()
        self._cv = threading.Condition(self._mu)  # notified when a round ends
        self.addrs = list(seeds)
        self.cur = seeds[0]
        self._next = 1 % len(seeds)
        self._round = None          # threading.Event of the round in progress
        self._rounds = 0            # rounds finished
        self.last = ("", 0)         # (addr, epoch) of the last finished round
        self._suspect = ""
        self._refreshed = None      # monotonic time of the last refresh, None: never
        self._refreshing = False
        self._listeners = set()     # callables run when a round ends
        self._closed = False

    def close(self):
        """No refreshes start after this."""
        with self._mu:
            self._closed = True

    def addr(self):
        """The address the next call should go to."""
        with self._mu:
            return self.cur

    def replicas(self):
        """The known replicas' addresses (a copy)."""
        with self._mu:
            return list(self.addrs)

    def multi(self):
        """True if there is more than one address to ask where the master is."""
        with self._mu:
            return len(self.addrs) > 1 or any(s != self.addrs[0] for s in self.seeds)

    def add_listener(self, fn):
        """Run fn() (quickly, without blocking) at the end of every locate round."""
        with self._mu:
            self._listeners.add(fn)

    def remove_listener(self, fn):
        """Stop running fn at the end of rounds."""
        with self._mu:
            self._listeners.discard(fn)

    def adopt(self, frm, master, replicas):
        """Bring the known replicas up to date from a GetMaster answer the
        replica at frm gave, naming master and the members replicas."""
        lst = []
        for a in replicas or ():
            if len(lst) == MAX_REPLICAS:
                break
            if usable_addr(a) and len(a) <= 512 and a not in lst:
                lst.append(a)
        if not lst:
            return False
        keep = [a for a in dict.fromkeys((frm, master)) if usable_addr(a) and a not in lst]
        lst = lst[:MAX_REPLICAS - len(keep)] + keep
        with self._mu:
            self._refreshed = time.monotonic()
            if lst == self.addrs:
                return False
            old, self.addrs = self.addrs, lst
            self._next = (lst.index(self.cur) + 1) % len(lst) if self.cur in lst else 0
        log.debug("chubby: replica list follows the cell's configuration: was %s, now %s", old, lst)
        return True

    def refresh_soon(self):
        """Make the next call ask for the members again (after a change of them)."""
        with self._mu:
            self._refreshed = None

    def maybe_refresh(self):
        """Ask the master guess for the members in the background if that has
        not been done for REFRESH_INTERVAL (called whenever a call is sent)."""
        with self._mu:
            if self._closed or self._refreshing or (
                    self._refreshed is not None and time.monotonic() - self._refreshed < REFRESH_INTERVAL):
                return
            self._refreshing = True
            self._refreshed = time.monotonic()
            addr = self.cur

        def run():
            try:
                master, _, replicas = self._ask(addr, "", self._timeout)
                self.adopt(addr, master, replicas)
            except Exception as e:  # a refresh that fails changes nothing
                log.debug("chubby: refreshing the replica list at %s failed: %s", addr, e)
            finally:
                with self._mu:
                    self._refreshing = False

        threading.Thread(target=run, name="chubbycell-refresh", daemon=True).start()

    def redirect(self, frm, hint):
        """The replica at frm said NOT_MASTER with hint. Returns True if the
        hint is to be followed (the guess moved there); otherwise the guess
        moves to the next known replica (if it was still frm)."""
        with self._mu:
            followed = bool(hint) and hint != frm and usable_addr(hint) and hint != self._suspect
            if self.cur != frm:
                return followed  # someone else moved on already
            if followed:
                self.cur = hint
                return True
            self._advance_locked()
            return False

    def unreachable(self, frm):
        """The replica at frm could not be reached (or the reply was lost)."""
        with self._mu:
            if self.cur == frm:
                self._suspect = frm
                self._advance_locked()

    def learned(self, addr):
        """An authoritative answer (GetMaster) named the master."""
        if usable_addr(addr):
            with self._mu:
                self.cur = addr

    def _advance_locked(self):
        self._next %= len(self.addrs)
        self.cur = self.addrs[self._next]
        self._next = (self._next + 1) % len(self.addrs)

    def rounds(self):
        """How many locate rounds have finished."""
        with self._mu:
            return self._rounds

    def locate_async(self):
        """Start a locate round unless one runs; return a threading.Event set
        when the round in progress ends (self.last then has its outcome)."""
        with self._mu:
            if self._round is not None:
                return self._round
            done = threading.Event()
            self._round = done
        threading.Thread(target=self._run_round, args=(done,), name="chubbycell-locate", daemon=True).start()
        return done

    def locate(self, within=None):
        """Run (or join) a locate round and wait for it (bounded by the
        round's own timeouts, and by within seconds if given); return
        (addr, epoch) of the latest outcome."""
        w = 2 * self._timeout + 1
        self.locate_async().wait(w if within is None else min(w, within))
        with self._mu:
            return self.last

    def _ask_all(self, addrs, suspect):
        answers = []
        mu = threading.Lock()

        def one(a):
            start = time.monotonic()
            try:
                master, epoch, replicas = self._ask(a, suspect, self._timeout)
                res = (a, master, epoch, replicas, None)
            except Exception as e:
                res = (a, "", 0, (), e)
            with mu:
                answers.append(res + (time.monotonic() - start,))

        threads = [threading.Thread(target=one, args=(a,), daemon=True) for a in addrs]
        for th in threads:
            th.start()
        deadline = time.monotonic() + self._timeout + 0.5
        for th in threads:
            th.join(max(0.0, deadline - time.monotonic()))
        with mu:
            return list(answers)

    def _run_round(self, done):
        best = ("", "", 0, ())
        try:
            with self._mu:
                suspect = self._suspect
                members = list(self.addrs)
            answers = self._ask_all(members, suspect)
            if not any(e is None and usable_addr(m) for _, m, _, _, e, _ in answers):
                # Nobody there knows (a replica removed from the cell
                # refuses): fall back on where the client was told to look.
                seeds = [s for s in self.seeds if s not in members]
                if seeds:
                    answers += self._ask_all(seeds, suspect)
            for frm, master, epoch, replicas, err, took in answers:
                if err is not None:
                    log.debug("chubby: locate: %s: %s after %.3fs", frm, err, took)
                    continue
                log.debug("chubby: locate: %s names %s@%d after %.3fs", frm, master, epoch, took)
                if not usable_addr(master):
                    continue
                if (best[1] == "" or epoch > best[2] or
                        (epoch == best[2] and frm == master and best[0] != best[1])):
                    best = (frm, master, epoch, replicas)
            if best[1]:
                self.adopt(best[0], best[1], best[3])
        finally:
            with self._mu:
                if best[1]:
                    self.cur = best[1]
                if self._suspect == suspect:
                    self._suspect = ""
                self.last = (best[1], best[2])
                self._round = None
                self._rounds += 1
                listeners = list(self._listeners)
                self._cv.notify_all()
            done.set()
            for fn in listeners:
                fn()

    def wake(self):
        """Wake every pause() to check its stop()."""
        with self._mu:
            self._cv.notify_all()

    def pause(self, until, frm, refused, known_epoch, stop=None):
        """Sleep until the monotonic time until, or until a locate round
        (anyone's) ends naming a master other than frm — or frm itself when
        frm refused (it was alive and is now named master), or a master of an
        epoch after known_epoch — or, if given, until stop() is true after a
        wake() (a cancelled call's)."""
        with self._mu:
            while True:
                left = until - time.monotonic()
                if left <= 0 or (stop is not None and stop()):
                    return
                seen = self._rounds
                self._cv.wait(left)
                if self._rounds != seen:
                    addr, epoch = self.last
                    if addr and (addr != frm or refused or epoch > known_epoch):
                        return


def ask_master(pool):
    """The Master's ask function over pool: GetMaster sent to addr alone."""

    def ask(addr, suspect, timeout):
        conn = pool.get(addr)
        try:
            conn.set_timeout(timeout)
            req = _wire.ttypes.GetMasterRequest(unreachable=suspect or None)
            r = conn.cell.GetMaster(req)
        except BaseException:
            conn.close()
            raise
        pool.put(conn)
        return r.master_address or "", r.epoch or 0, list(r.replicas or ())

    return ask
