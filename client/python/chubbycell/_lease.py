"""A session's local lease, by the rules of the Go client's package
client/lease (the same rules, on time.monotonic()):

- The local lease ends at the send time of the request that was answered
  plus the lease the answer granted, on the client's own clock; a later
  answer never moves the end back.
- Before it ends the session is safe. When it ends with no answer the
  session is in jeopardy, for the grace period, counted from the end of the
  local lease.
- An answer in jeopardy makes the session safe again, unless its lease is
  already over (a reply that took longer than its lease renews nothing).
- At the end of the grace period, or when the cell says so, the session is
  expired.

It is not thread-safe: the Session guards it with its lock.
"""

SAFE, JEOPARDY, EXPIRED = "safe", "jeopardy", "expired"
NO_CHANGE, ENTERED_JEOPARDY, GRACE_OVER = 0, 1, 2


class LocalLease:
    """One session's lease as its client sees it (times in monotonic seconds)."""

    def __init__(self, sent, lease, epoch, grace):
        self.grace = grace
        self.end = sent + lease
        self.lease = lease
        self.epoch = epoch
        self.renewals = 0
        self._jeopardy = False
        self.ended = False

    def state(self, now):
        """SAFE, JEOPARDY or EXPIRED at now, exact to the moment."""
        if self.ended:
            return EXPIRED
        if now < self.end:
            return SAFE
        if now < self.end + self.grace:
            return JEOPARDY
        return EXPIRED

    def step(self, now):
        """Report the transition at now the caller has not heard of yet: each
        move to jeopardy once (ENTERED_JEOPARDY), and the end of the grace
        period (GRACE_OVER, which ends the lease)."""
        st = self.state(now)
        if st == JEOPARDY and not self._jeopardy:
            self._jeopardy = True
            return ENTERED_JEOPARDY
        if st == EXPIRED and not self.ended:
            self.ended = True
            return GRACE_OVER
        return NO_CHANGE

    def renew(self, sent, lease, now):
        """Take an answer to a request sent at sent granting lease, received
        at now. Returns (renewed, safe_again): renewed when the session is
        safe now; safe_again when it was in jeopardy before."""
        if self.ended:
            return False, False
        self.lease = lease
        self.end = max(self.end, sent + lease)
        if self.end <= now:
            return False, False
        safe_again = self._jeopardy
        self._jeopardy = False
        self.renewals += 1
        return True, safe_again

    def note_epoch(self, epoch):
        """Record a master epoch heard for the session; True if it is newer."""
        if epoch is None or epoch <= self.epoch:
            return False
        self.epoch = epoch
        return True

    def grace_end(self):
        """When the session expires if nothing renews it."""
        return self.end + self.grace
