package io.chubby.cell;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.TimeUnit;

/**
 * Which replica the client believes is the master, and the addresses of the
 * cell's replicas (the Go client's master, simplified). Every call goes to
 * the guess. Where the guess moves:
 *
 * <ul>
 *   <li>NOT_MASTER with a hint (master_address): to the hint, unless it names
 *       the replica this client has just failed to reach (the refusing
 *       replica has not noticed the failure yet).</li>
 *   <li>NOT_MASTER without one, or a replica that cannot be reached: to the
 *       next known replica, round-robin; and, with more than one address,
 *       a locate round asks every known replica GetMaster at once and moves
 *       to the answer with the highest epoch.</li>
 * </ul>
 *
 * <p>The known replicas start as the configured ones (the seeds) and follow
 * the cell's configuration: a locate round's best answer (and every
 * answer to {@link Cell#getMaster()}, and one GetMaster to the master every
 * 30 s while the client is used) replaces them with the members it names,
 * keeping the replica that answered and the master it named, at most
 * {@link #MAX_REPLICAS} well-formed addresses. A round in which no known
 * replica named a master (none answered, or all refused, as replicas removed
 * from the cell do) also asks the seeds it did not ask. Thread-safe.
 */
final class Master {
    /** Replica addresses kept from the cell's answers. */
    static final int MAX_REPLICAS = 16;
    /** Bounds one replica's GetMaster answer once connected (replicas answer from memory, or hold it 200 ms). */
    static final int LOCATE_REPLY_TIMEOUT_MS = 1000;
    /** How often a client in use asks the master for the configuration's members. */
    static final long REFRESH_NANOS = 30_000_000_000L;

    /** The outcome of a locate round. */
    record Located(String addr, long epoch) {}

    private final List<String> seeds;
    private final Pool pool;
    private final ExecutorService exec;

    private final Object mu = new Object();
    private List<String> addrs;
    private String cur;
    private int next;
    private String suspect;
    private CompletableFuture<Void> round;
    private Located last = new Located("", 0);
    private long roundsEnded; // counts finished rounds; mu.notifyAll() on each
    private long refreshedAt;
    private boolean refreshing;
    private long hintsFollowed; // NOT_MASTER hints that moved the guess (for tests)

    Master(List<String> seeds, Pool pool, ExecutorService exec) {
        this.seeds = List.copyOf(seeds);
        this.pool = pool;
        this.exec = exec;
        this.addrs = new ArrayList<>(seeds);
        this.cur = seeds.get(0);
        this.next = 1 % seeds.size();
        this.refreshedAt = System.nanoTime() - REFRESH_NANOS;
    }

    /** The address the next call should go to. */
    String addr() {
        synchronized (mu) {
            return cur;
        }
    }

    /** The known replicas' addresses (a copy). */
    List<String> replicas() {
        synchronized (mu) {
            return List.copyOf(addrs);
        }
    }

    /** Whether there is more than one address to ask where the master is. */
    boolean multi() {
        synchronized (mu) {
            if (addrs.size() > 1) {
                return true;
            }
            for (String s : seeds) {
                if (!s.equals(addrs.get(0))) {
                    return true;
                }
            }
            return false;
        }
    }

    /**
     * Records that the replica at from is not the master. A valid hint that
     * differs from from, and is not the replica just found unreachable,
     * becomes the guess (returns true); otherwise the next known address
     * does (returns false: nobody said where the master is).
     */
    boolean redirect(String from, String hint) {
        synchronized (mu) {
            boolean followed = hint != null && !hint.isEmpty() && !hint.equals(from)
                    && Check.addrProblem(hint) == null && !hint.equals(suspect);
            if (!cur.equals(from)) {
                return followed; // someone else already moved on
            }
            if (followed) {
                cur = hint;
                hintsFollowed++;
                return true;
            }
            advance();
            return false;
        }
    }

    /** Records that the replica at from could not be reached. */
    void unreachable(String from) {
        pool.purge(from);
        synchronized (mu) {
            if (cur.equals(from)) {
                suspect = from;
                advance();
            }
        }
    }

    /** Records the master's address from an authoritative answer (GetMaster). */
    void learned(String addr) {
        if (addr == null || Check.addrProblem(addr) != null) {
            return;
        }
        synchronized (mu) {
            cur = addr;
        }
    }

    private void advance() {
        next %= addrs.size();
        cur = addrs.get(next);
        next = (next + 1) % addrs.size();
    }

    /**
     * Brings the known replicas up to date from a GetMaster answer of the
     * replica at from naming master and the configuration's members.
     */
    void adopt(String from, String master, List<String> replicas) {
        List<String> list = new ArrayList<>();
        if (replicas != null) {
            for (String a : replicas) {
                if (list.size() == MAX_REPLICAS) {
                    break;
                }
                if (a != null && Check.addrProblem(a) == null && !list.contains(a)) {
                    list.add(a);
                }
            }
        }
        synchronized (mu) {
            refreshedAt = System.nanoTime();
        }
        if (list.isEmpty()) {
            return; // no configuration named: keep what is known
        }
        List<String> keep = new ArrayList<>();
        for (String a : new String[] {from, master}) {
            if (a != null && Check.addrProblem(a) == null && !list.contains(a) && !keep.contains(a)) {
                keep.add(a);
            }
        }
        while (list.size() > MAX_REPLICAS - keep.size()) {
            list.remove(list.size() - 1);
        }
        list.addAll(keep);
        synchronized (mu) {
            if (list.equals(addrs)) {
                return;
            }
            addrs = list;
            int i = list.indexOf(cur);
            next = i >= 0 ? (i + 1) % list.size() : 0;
        }
    }

    /** Asks the replica at addr where the master is. */
    chubby.GetMasterResponse ask(String addr, String suspect) throws Exception {
        chubby.GetMasterRequest req = new chubby.GetMasterRequest();
        if (suspect != null) {
            req.setUnreachable(suspect);
        }
        return pool.invoke(addr, false, LOCATE_REPLY_TIMEOUT_MS, c -> c.cell.GetMaster(req));
    }

    /**
     * Starts a locate round unless one is running, and returns a future
     * completed when the round in progress ends; {@link #lastLocated()} then
     * has its outcome. Rounds are shared: however many calls and sessions
     * look for the master at once, each replica is asked once.
     */
    CompletableFuture<Void> locate() {
        synchronized (mu) {
            if (round != null) {
                return round;
            }
            CompletableFuture<Void> done = new CompletableFuture<>();
            round = done;
            try {
                exec.execute(() -> runRound(done));
            } catch (RuntimeException e) { // the executor is shut down: the client is closed
                round = null;
                done.complete(null);
            }
            return done;
        }
    }

    /** Runs (or joins) a locate round and waits for it. */
    void locateWait() throws InterruptedException {
        try {
            locate().get();
        } catch (java.util.concurrent.ExecutionException e) {
            // runRound never completes exceptionally
        }
    }

    /** One replica's answer in a locate round: r is null when it refused or could not be reached. */
    private record Answer(String from, chubby.GetMasterResponse r) {}

    private List<Answer> askAll(List<String> list, String suspect) {
        List<CompletableFuture<Answer>> fs = new ArrayList<>();
        for (String a : list) {
            CompletableFuture<Answer> f = new CompletableFuture<>();
            fs.add(f);
            try {
                exec.execute(() -> {
                    try {
                        f.complete(new Answer(a, ask(a, suspect)));
                    } catch (Throwable e) { // a refusal, or unreachable: no master named
                        f.complete(new Answer(a, null));
                    }
                });
            } catch (RuntimeException e) {
                f.complete(new Answer(a, null));
            }
        }
        List<Answer> out = new ArrayList<>();
        for (CompletableFuture<Answer> f : fs) {
            // Each ask is bounded by the connect timeout plus the reply
            // timeout; the bound here is a backstop.
            try {
                out.add(f.get(60, TimeUnit.SECONDS));
            } catch (Exception e) {
                out.add(new Answer("", null));
            }
        }
        return out;
    }

    private void runRound(CompletableFuture<Void> done) {
        String sus;
        List<String> members;
        synchronized (mu) {
            sus = suspect;
            members = List.copyOf(addrs);
        }
        List<Answer> answers = askAll(members, sus);
        if (answers.stream().noneMatch(Master::namesMaster)) {
            // Nobody there knows (a replica removed from the cell refuses):
            // fall back on where the client was told to look.
            List<String> rest = new ArrayList<>();
            for (String s : seeds) {
                if (!members.contains(s)) {
                    rest.add(s);
                }
            }
            if (!rest.isEmpty()) {
                answers.addAll(askAll(rest, sus));
            }
        }
        Answer best = null;
        for (Answer a : answers) {
            if (a.r() == null || a.r().getMaster_address() == null || Check.addrProblem(a.r().getMaster_address()) != null) {
                continue;
            }
            if (best == null || better(a, best)) {
                best = a;
            }
        }
        if (best != null) {
            adopt(best.from(), best.r().getMaster_address(), best.r().getReplicas());
        }
        Located loc = best == null ? new Located("", 0) : new Located(best.r().getMaster_address(), best.r().getEpoch());
        finish(done, sus, loc);
    }

    /** Whether a names a well-formed master address. */
    private static boolean namesMaster(Answer a) {
        return a.r() != null && a.r().getMaster_address() != null && Check.addrProblem(a.r().getMaster_address()) == null;
    }

    private static boolean better(Answer a, Answer b) {
        if (a.r().getEpoch() != b.r().getEpoch()) {
            return a.r().getEpoch() > b.r().getEpoch();
        }
        // On a tie, the master's own answer (its configuration is the newest).
        return a.from().equals(a.r().getMaster_address()) && !b.from().equals(b.r().getMaster_address());
    }

    private void finish(CompletableFuture<Void> done, String sus, Located loc) {
        List<Runnable> tell;
        synchronized (mu) {
            if (!loc.addr().isEmpty()) {
                cur = loc.addr();
            }
            if (java.util.Objects.equals(suspect, sus)) {
                suspect = null;
            }
            last = loc;
            round = null;
            roundsEnded++;
            mu.notifyAll();
            tell = List.copyOf(listeners);
        }
        done.complete(null);
        for (Runnable r : tell) {
            r.run();
        }
    }

    /** The outcome of the last finished locate round. */
    Located lastLocated() {
        synchronized (mu) {
            return last;
        }
    }

    /** How many NOT_MASTER hints have moved the guess so far. */
    long hintsFollowed() {
        synchronized (mu) {
            return hintsFollowed;
        }
    }

    /** How many locate rounds have ended so far. */
    long roundsEnded() {
        synchronized (mu) {
            return roundsEnded;
        }
    }

    /**
     * Waits until deadline (System.nanoTime), or until a locate round (anyone's)
     * ends naming a master other than from, where the call just failed — or
     * naming from itself when from refused (it was alive but not the master,
     * and is now named), or a master of an epoch after known.
     */
    void pause(long deadline, String from, boolean refused, long known) throws InterruptedException {
        synchronized (mu) {
            long seen = roundsEnded;
            while (true) {
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    return;
                }
                if (roundsEnded != seen) {
                    seen = roundsEnded;
                    if (!last.addr().isEmpty() && (!last.addr().equals(from) || refused || last.epoch() > known)) {
                        return;
                    }
                }
                TimeUnit.NANOSECONDS.timedWait(mu, left);
            }
        }
    }

    /**
     * Starts a refresh of the known replicas (one GetMaster to the master
     * guess, in the background) if none ran for 30 s and none is in flight.
     * Called whenever something is sent, so an idle client asks nothing.
     */
    void maybeRefresh() {
        String addr;
        synchronized (mu) {
            if (refreshing || System.nanoTime() - refreshedAt < REFRESH_NANOS) {
                return;
            }
            refreshing = true;
            refreshedAt = System.nanoTime();
            addr = cur;
        }
        try {
            exec.execute(() -> {
                try {
                    chubby.GetMasterResponse r = ask(addr, null);
                    adopt(addr, r.getMaster_address(), r.getReplicas());
                } catch (Throwable e) {
                    // The next refresh tries again; calls find the master on their own.
                } finally {
                    synchronized (mu) {
                        refreshing = false;
                    }
                }
            });
        } catch (RuntimeException e) {
            synchronized (mu) {
                refreshing = false;
            }
        }
    }

    /** Registers r, run (on the round's thread, so it must not block) after every locate round ends. */
    void onRoundEnd(Runnable r) {
        synchronized (mu) {
            listeners.add(r);
        }
    }

    /** Unregisters what onRoundEnd registered. */
    void removeRoundEnd(Runnable r) {
        synchronized (mu) {
            listeners.remove(r);
        }
    }

    private final List<Runnable> listeners = new ArrayList<>();
}
