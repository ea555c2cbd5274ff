package io.chubby.cell;

import chubby.CreateMode;
import chubby.ErrorCode;
import chubby.EventKind;
import chubby.LockMode;
import chubby.chubbyConstants;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The Java client's tests, run against a real cell by client/java/java_test.go
 * (in this package, for the test hook Cell.dropReply). Each mode is one
 * scenario; it prints "ok: ..." per check and exits 1 at the first failure
 * ("FAIL: ..."), 0 when every check held. Scenarios that need the Go test
 * to act (stop a replica, kill a process) talk to it by lines: this process
 * prints a line, the Go test answers on stdin.
 *
 * <pre>
 * CellTest basic ADDR                    file ops, locks, events, errors, exactly-once (one replica)
 * CellTest features ADDR                 the oracle, whoAmI, Multi, SetACL (one plaintext replica)
 * CellTest deadlines ADDR                deadlines and cancellation (one replica; a silent server of its own)
 * CellTest cache ADDR                    the session cache: hits, invalidations, no stale read
 * CellTest tls ADDR DIR OTHERCA          mutual TLS and ACLs (a TLS cell whose admin is the principal
 *                                        CHUBBY_TLS_* names; DIR holds ca.crt, bob's and carol's .crt and .key)
 * CellTest notmaster NONMASTER MASTER    NOT_MASTER following (a replicated cell)
 * CellTest failover ADDR...              a lock and calls across a failover (prints LOCKED, reads STOPPED)
 * CellTest jeopardy ADDR                 jeopardy, safe again, expired (prints READY and JEOPARDY, reads
 *                                        STOPPED and RESTARTED: the one replica stops and restarts)
 * CellTest holder ADDR PATH              holds PATH's lock until killed (prints LOCKED)
 * CellTest waiter ADDR PATH              gets PATH's lock once its holder is gone (prints HELD, reads GO SEQ)
 * </pre>
 */
public final class CellTest {
    private CellTest() {}

    private static final BufferedReader STDIN = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));

    /** A check failed. */
    static final class Failed extends RuntimeException {
        private static final long serialVersionUID = 1L;

        Failed(String what) {
            super(what);
        }
    }

    /** A call that should fail. */
    interface Call {
        void run() throws Exception;
    }

    static void check(boolean cond, String what) {
        if (!cond) {
            throw new Failed(what);
        }
        System.out.println("ok: " + what);
    }

    /** Checks that c fails with a ChubbyException of kind and code (code null: any). */
    static ChubbyException fails(ChubbyException.Kind kind, ErrorCode code, String what, Call c) throws Exception {
        try {
            c.run();
        } catch (ChubbyException e) {
            check(e.kind() == kind && (code == null || e.code() == code),
                    what + " [" + e.getMessage() + "] (want " + kind + " " + code + ")");
            return e;
        }
        throw new Failed(what + ": the call succeeded");
    }

    static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static String line(String want) throws Exception {
        String l = STDIN.readLine();
        if (l == null || !l.startsWith(want)) {
            throw new Failed("wanted a line starting with " + want + " on stdin, got " + l);
        }
        return l;
    }

    /**
     * Runs the mode named by args[0].
     *
     * @param args the mode and its arguments
     */
    public static void main(String[] args) {
        if (args.length < 2) {
            System.err.println("usage: CellTest basic|features|deadlines|cache|tls|notmaster|failover|jeopardy|holder|waiter ARGS...");
            System.exit(2);
        }
        List<String> rest = Arrays.asList(args).subList(1, args.length);
        try {
            switch (args[0]) {
                case "basic" -> basic(List.of(rest.get(0)));
                case "features" -> Features.plain(List.of(rest.get(0)));
                case "deadlines" -> Features.deadlines(List.of(rest.get(0)));
                case "cache" -> Features.cache(List.of(rest.get(0)));
                case "tls" -> Features.tls(rest.get(0), java.nio.file.Path.of(rest.get(1)), java.nio.file.Path.of(rest.get(2)));
                case "notmaster" -> notMaster(rest.get(0), rest.get(1));
                case "failover" -> failover(rest);
                case "jeopardy" -> jeopardy(List.of(rest.get(0)));
                case "holder" -> holder(List.of(rest.get(0)), rest.get(1));
                case "waiter" -> waiter(List.of(rest.get(0)), rest.get(1));
                default -> {
                    System.err.println("unknown mode " + args[0]);
                    System.exit(2);
                }
            }
        } catch (Failed e) {
            System.out.println("FAIL: " + e.getMessage());
            System.out.flush();
            System.exit(1);
        } catch (Throwable e) {
            System.out.println("FAIL: unexpected " + e);
            e.printStackTrace(System.out);
            System.out.flush();
            System.exit(1);
        }
        System.out.println("PASS");
        System.out.flush();
        System.exit(0);
    }

    // ------------------------------------------------------------------

    static void basic(List<String> addrs) throws Exception {
        // Bad input is refused before anything is sent.
        fails(ChubbyException.Kind.LOCAL, ErrorCode.INVALID_ARGUMENT, "connect with no address", () -> Cell.connect(List.of()));
        fails(ChubbyException.Kind.LOCAL, ErrorCode.INVALID_ARGUMENT, "connect to an address without a port",
                () -> Cell.connect(List.of("localhost")));
        fails(ChubbyException.Kind.LOCAL, ErrorCode.INVALID_ARGUMENT, "connect to port 99999",
                () -> Cell.connect(List.of("127.0.0.1:99999")));
        fails(ChubbyException.Kind.LOCAL, ErrorCode.INVALID_ARGUMENT, "connect with a zero call timeout",
                () -> Cell.connect(addrs, new CellOptions().callTimeout(Duration.ZERO)));
        int dead;
        try (ServerSocket ss = new ServerSocket(0)) {
            dead = ss.getLocalPort();
        }
        long t0 = System.nanoTime();
        fails(ChubbyException.Kind.UNREACHABLE, null, "connect to a port nobody listens on",
                () -> Cell.connect(List.of("127.0.0.1:" + dead)));
        check(System.nanoTime() - t0 < TimeUnit.SECONDS.toNanos(20), "an unreachable cell fails within the retry bound");

        for (CellOptions.Transport tr : CellOptions.Transport.values()) {
            try (Cell cell = Cell.connect(addrs, new CellOptions().transport(tr).clientName("java-test-" + tr))) {
                MasterInfo mi = cell.getMaster();
                check(mi.address().equals(addrs.get(0)) && mi.epoch() > 0, tr + ": GetMaster names the one replica: " + mi);
                try (Session s = cell.newSession()) {
                    check(s.state() == SessionState.SAFE && s.leaseRemaining().toMillis() > 0,
                            tr + ": new session " + s.id() + " is safe, lease left " + s.leaseRemaining());
                    Handle h = s.open("/java-" + tr, OpenOptions.readWrite().create(CreateMode.CREATE_NEW)
                            .initialContent(bytes("first")));
                    check(h.created() && h.read().text().equals("first"), tr + ": open creates with initial content");
                    h.delete();
                    h.close();
                }
            }
        }

        try (Cell cell = Cell.connect(addrs)) {
            fileOps(cell);
            locks(cell);
            events(cell);
            exactlyOnce(cell);
            sessionEnd(cell);
        }
    }

    static void fileOps(Cell cell) throws Exception {
        try (Session s = cell.newSession()) {
            Handle h = s.open("/java-file", OpenOptions.readWrite().create(CreateMode.CREATE_NEW));
            check(h.created() && h.path().equals("/java-file"), "open CREATE_NEW creates /java-file");
            Stat st = h.write(bytes("hello from java"));
            check(st.contentGeneration() == 2 && st.size() == 15, "write bumps the generation: " + st.contentGeneration());
            Contents c = h.read();
            check(c.text().equals("hello from java") && c.stat().size() == 15, "read returns what was written");
            ChubbyException e = fails(ChubbyException.Kind.CELL, ErrorCode.GENERATION_MISMATCH,
                    "write with a stale generation is refused", () -> h.write(bytes("lost"), 1L));
            check(e.path().equals("/java-file") && e.op().equals("write"), "the exception names op and path: " + e.getMessage());
            check(h.read().text().equals("hello from java"), "a refused write changes nothing");
            st = h.write(bytes("second"), st.contentGeneration());
            check(st.contentGeneration() == 3 && h.stat().contentGeneration() == 3, "write with the right generation");
            fails(ChubbyException.Kind.CELL, ErrorCode.EXISTS, "CREATE_NEW of an existing file",
                    () -> s.open("/java-file", OpenOptions.read().create(CreateMode.CREATE_NEW)));
            fails(ChubbyException.Kind.CELL, ErrorCode.NOT_FOUND, "open of a missing path", () -> s.open("/no/such"));
            Handle ro = s.open("/java-file");
            fails(ChubbyException.Kind.CELL, ErrorCode.PERMISSION_DENIED, "write through a READ handle",
                    () -> ro.write(bytes("x")));
            ro.close();

            // Bad input: refused locally, nothing sent, nothing changed.
            fails(ChubbyException.Kind.LOCAL, ErrorCode.INVALID_ARGUMENT, "open of a malformed path",
                    () -> s.open("bad path"));
            fails(ChubbyException.Kind.LOCAL, ErrorCode.INVALID_ARGUMENT, "open of a path with ..",
                    () -> s.open("/a/../b"));
            fails(ChubbyException.Kind.LOCAL, ErrorCode.INVALID_ARGUMENT, "open with undefined event bits",
                    () -> s.open("/java-file", OpenOptions.read().eventMask(1 << 12)));
            fails(ChubbyException.Kind.LOCAL, ErrorCode.TOO_LARGE, "write over MAX_CONTENT_BYTES",
                    () -> h.write(new byte[chubbyConstants.MAX_CONTENT_BYTES + 1]));
            fails(ChubbyException.Kind.LOCAL, ErrorCode.INVALID_ARGUMENT, "write of null", () -> h.write(null));
            fails(ChubbyException.Kind.LOCAL, ErrorCode.INVALID_ARGUMENT, "acquire with no wait",
                    () -> h.acquire(LockMode.EXCLUSIVE, Duration.ZERO));
            fails(ChubbyException.Kind.LOCAL, ErrorCode.INVALID_ARGUMENT, "acquire with a lock delay over the maximum",
                    () -> h.acquire(LockMode.EXCLUSIVE, Duration.ofSeconds(1), Duration.ofMinutes(2)));
            check(h.stat().contentGeneration() == 3, "the refused calls changed nothing");

            // Directories.
            Stat d = s.mkdir("/java-dir/sub", true);
            check(d.isDirectory() && d.path().equals("/java-dir/sub"), "mkdir with parents");
            s.createFile("/java-dir/b", bytes("B"), false);
            s.createFile("/java-dir/a", bytes("A"), false);
            Handle dir = s.open("/java-dir");
            List<String> names = new ArrayList<>();
            for (DirEntry de : dir.readDir()) {
                names.add(de.name());
            }
            check(names.equals(List.of("a", "b", "sub")), "readDir lists the children sorted: " + names);
            dir.readDirLimit = 1; // three children in three pages
            names.clear();
            for (DirEntry de : dir.readDir()) {
                names.add(de.name());
            }
            check(names.equals(List.of("a", "b", "sub")), "readDir pages: " + names);
            fails(ChubbyException.Kind.CELL, ErrorCode.IS_DIRECTORY, "read of a directory", dir::read);
            Handle dw = s.open("/java-dir", OpenOptions.readWrite());
            fails(ChubbyException.Kind.CELL, ErrorCode.NOT_EMPTY, "delete of a non-empty directory", () -> dw.delete(false));
            dw.delete(true);
            fails(ChubbyException.Kind.CELL, ErrorCode.NOT_FOUND, "recursive delete removed the children",
                    () -> s.open("/java-dir/a"));
            fails(ChubbyException.Kind.CELL, ErrorCode.HANDLE_INVALID, "a handle to a deleted node is invalid", dir::stat);
            dir.close();
            dw.close();

            // Sequential, ephemeral.
            Handle q1 = s.open("/java-seq-", OpenOptions.readWrite().create(CreateMode.CREATE_NEW).sequential(true));
            Handle q2 = s.open("/java-seq-", OpenOptions.readWrite().create(CreateMode.CREATE_NEW).sequential(true));
            check(q1.path().matches("/java-seq-\\d{10}") && q1.path().compareTo(q2.path()) < 0,
                    "sequential names count up: " + q1.path() + " < " + q2.path());
            h.delete();
            h.close();
        }
    }

    static void locks(Cell cell) throws Exception {
        try (Session a = cell.newSession(); Session b = cell.newSession()) {
            Handle ha = a.open("/java-lock", OpenOptions.readWrite().create(CreateMode.OPEN_OR_CREATE));
            Handle hb = b.open("/java-lock");
            Sequencer seq = ha.tryAcquire(LockMode.EXCLUSIVE);
            check(seq.path().equals("/java-lock") && seq.mode() == LockMode.EXCLUSIVE && seq.lockGeneration() == 1,
                    "tryAcquire: " + seq.format());
            check(Sequencer.parse(seq.format()).equals(seq), "a sequencer's printable form parses back");
            check(ha.sequencer().equals(seq), "GetSequencer returns the held lock's sequencer");
            check(cell.checkSequencer(seq).valid(), "CheckSequencer: valid while held");
            fails(ChubbyException.Kind.CELL, ErrorCode.LOCK_HELD, "another session's tryAcquire finds it held",
                    () -> hb.tryAcquire(LockMode.EXCLUSIVE));
            fails(ChubbyException.Kind.CELL, ErrorCode.TIMED_OUT, "another session's acquire times out",
                    () -> hb.acquire(LockMode.EXCLUSIVE, Duration.ofMillis(300)));

            // A waiter is granted the lock when the holder releases it.
            CompletableFuture<Sequencer> waiting = CompletableFuture.supplyAsync(() -> {
                try {
                    return hb.acquire(LockMode.EXCLUSIVE, Duration.ofSeconds(20));
                } catch (ChubbyException e) {
                    throw new RuntimeException(e);
                }
            });
            for (int i = 0; i < 200 && ha.stat().lockWaiters() == 0; i++) {
                Thread.sleep(10);
            }
            check(ha.stat().lockWaiters() == 1, "the other session waits for the lock");
            ha.release();
            check(!cell.checkSequencer(seq).valid(), "CheckSequencer: invalid after release");
            Sequencer seqB = waiting.get(20, TimeUnit.SECONDS);
            check(seqB.lockGeneration() == 2, "the waiter got the lock: " + seqB.format());
            fails(ChubbyException.Kind.CELL, ErrorCode.LOCK_NOT_HELD, "release of a lock not held", ha::release);
            hb.release();

            // try-with-resources.
            Sequencer inside;
            try (Lock l = a.lock("/java-twr", Duration.ofSeconds(5))) {
                inside = l.sequencer();
                check(l.check().valid(), "Lock holds inside try: " + inside.format());
                fails(ChubbyException.Kind.CELL, ErrorCode.LOCK_HELD, "another session cannot take it",
                        () -> b.tryLock("/java-twr"));
            }
            check(!cell.checkSequencer(inside).valid(), "closing the Lock released it");
            try (Lock l = b.tryLock("/java-twr")) {
                check(l.sequencer().lockGeneration() == inside.lockGeneration() + 1, "then the other session takes it");
            }

            // Shared.
            try (Lock s1 = a.lockShared("/java-shared"); Lock s2 = b.lockShared("/java-shared")) {
                check(s1.check().valid() && s2.check().valid() && s1.sequencer().mode() == LockMode.SHARED,
                        "two sessions hold a shared lock at once");
                fails(ChubbyException.Kind.CELL, ErrorCode.LOCK_HELD, "no exclusive lock while it is shared",
                        () -> a.tryLock("/java-shared"));
            }
            ha.close();
            hb.close();
        }
        // Parsing is strict.
        for (String bad : new String[] {"", "chubby-seq:v1:X:1:1:/a", "chubby-seq:v1:E:01:1:/a", "chubby-seq:v1:E:1:-1:/a",
                "chubby-seq:v1:E:1:1:a", "chubby-seq:v1:E:99999999999999999999:1:/a", "chubby-seq:v2:E:1:1:/a"}) {
            fails(ChubbyException.Kind.LOCAL, ErrorCode.INVALID_ARGUMENT, "parse rejects " + Check.quote(bad),
                    () -> Sequencer.parse(bad));
        }
    }

    static void events(Cell cell) throws Exception {
        try (Session s = cell.newSession(); Session other = cell.newSession()) {
            s.mkdir("/java-ev", false);
            BlockingQueue<Event> heard = new LinkedBlockingQueue<>();
            Handle dir = s.open("/java-ev", OpenOptions.read()
                    .eventMask(chubbyConstants.EVENT_MASK_CHILD_ADDED | chubbyConstants.EVENT_MASK_CHILD_REMOVED)
                    .listener((h, ev) -> heard.add(ev)));
            Handle f = s.open("/java-ev/f", OpenOptions.readWrite().create(CreateMode.CREATE_NEW)
                    .eventMask(chubbyConstants.EVENT_MASK_FILE_CONTENTS_MODIFIED | chubbyConstants.EVENT_MASK_HANDLE_INVALID));
            Event added = heard.poll(10, TimeUnit.SECONDS);
            check(added != null && added.kind() == EventKind.CHILD_ADDED && added.child().equals("f") && added.seq() > 0,
                    "the listener hears CHILD_ADDED f: " + added);
            // Another session writes: this one's handle hears it.
            try (Handle w = other.open("/java-ev/f", OpenOptions.readWrite())) {
                for (int i = 1; i <= 3; i++) {
                    w.write(bytes("v" + i));
                }
            }
            long lastGen = 0, lastSeq = added.seq();
            for (int i = 0; i < 3; i++) {
                Event ev = f.events().poll(10, TimeUnit.SECONDS);
                check(ev != null && ev.kind() == EventKind.FILE_CONTENTS_MODIFIED && ev.contentGeneration() > lastGen
                        && ev.seq() > lastSeq && ev.path().equals("/java-ev/f"),
                        "FILE_CONTENTS_MODIFIED " + (i + 1) + " in order, once: " + ev);
                lastGen = ev.contentGeneration();
                lastSeq = ev.seq();
            }
            // The events are acknowledged on the next KeepAlive: the master
            // answers a KeepAlive at once while the session has events it has
            // not acknowledged, so without the acks the session would renew
            // continuously; with them the master parks each KeepAlive until
            // shortly before the lease ends (2 s in this test: a few renewals).
            long r0 = s.renewals();
            Thread.sleep(3000);
            long renewed = s.renewals() - r0;
            check(renewed >= 1 && renewed <= 10, "events acknowledged: " + renewed + " KeepAlive replies in 3 s");
            check(f.events().isEmpty() && heard.isEmpty(), "no event delivered twice");
            // Deleting the node: HANDLE_INVALID, and no more events.
            f.delete();
            Event inv = f.events().poll(10, TimeUnit.SECONDS);
            check(inv != null && inv.kind() == EventKind.HANDLE_INVALID, "HANDLE_INVALID after delete: " + inv);
            Event removed = heard.poll(10, TimeUnit.SECONDS);
            check(removed != null && removed.kind() == EventKind.CHILD_REMOVED, "CHILD_REMOVED f: " + removed);
            check(f.eventsClosed(), "a deleted node's handle receives no more events");
            dir.close();
            check(dir.eventsClosed(), "a closed handle receives no more events");
        }
    }

    static void exactlyOnce(Cell cell) throws Exception {
        try (Session s = cell.newSession()) {
            AtomicInteger dropped = new AtomicInteger();
            // Each chosen call's first reply is dropped after the cell applied
            // it, as a broken connection would; the library resends it with
            // the same request id, and the cell answers with its first answer
            // instead of applying it again.
            AtomicBoolean armed = new AtomicBoolean();
            String[] which = new String[1];
            Cell.dropReply = op -> {
                if (op.equals(which[0]) && armed.getAndSet(false)) {
                    dropped.incrementAndGet();
                    return true;
                }
                return false;
            };
            try {
                which[0] = "open";
                armed.set(true);
                Handle h = s.open("/java-once", OpenOptions.readWrite().create(CreateMode.CREATE_NEW));
                check(dropped.get() == 1 && h.created(), "CREATE_NEW whose reply was lost: resent, created once (no EXISTS)");

                which[0] = "write";
                armed.set(true);
                long g0 = h.lastStat().contentGeneration();
                Stat st = h.write(bytes("once"), g0);
                check(dropped.get() == 2 && st.contentGeneration() == g0 + 1,
                        "compare-and-swap write whose reply was lost: resent, no GENERATION_MISMATCH");
                check(h.stat().contentGeneration() == g0 + 1, "and applied once: generation " + (g0 + 1));

                which[0] = "write";
                armed.set(true);
                st = h.write(bytes("twice?"));
                check(dropped.get() == 3 && st.contentGeneration() == g0 + 2 && h.stat().contentGeneration() == g0 + 2,
                        "plain write whose reply was lost: applied once (generation " + (g0 + 2) + ")");

                which[0] = "try-acquire";
                armed.set(true);
                Sequencer seq = h.tryAcquire(LockMode.EXCLUSIVE);
                check(dropped.get() == 4 && seq.lockGeneration() == 1,
                        "tryAcquire whose reply was lost: resent, no LOCK_HELD from its own first attempt");

                which[0] = "mkdir";
                armed.set(true);
                Stat d = s.mkdir("/java-once-dir", false);
                check(dropped.get() == 5 && d.isDirectory(), "mkdir whose reply was lost: resent, no EXISTS");

                which[0] = "delete";
                armed.set(true);
                Handle dh = s.open("/java-once-dir", OpenOptions.readWrite());
                dh.delete();
                check(dropped.get() == 6, "delete whose reply was lost: resent, no HANDLE_INVALID");
                dh.close();

                // Many writes from several threads at once (each with its own
                // number; the floor follows the lowest in flight).
                List<Thread> ts = new ArrayList<>();
                CopyOnWriteArrayList<Throwable> errs = new CopyOnWriteArrayList<>();
                long before = h.stat().contentGeneration();
                for (int t = 0; t < 4; t++) {
                    Thread th = new Thread(() -> {
                        for (int i = 0; i < 10; i++) {
                            try {
                                h.write(bytes("w" + i));
                            } catch (ChubbyException e) {
                                errs.add(e);
                            }
                        }
                    });
                    th.start();
                    ts.add(th);
                }
                for (Thread th : ts) {
                    th.join(30_000);
                }
                check(errs.isEmpty() && h.stat().contentGeneration() == before + 40,
                        "40 concurrent writes, 40 generations: " + errs);
                h.release();
                h.close();
            } finally {
                Cell.dropReply = null;
            }
        }
    }

    static void sessionEnd(Cell cell) throws Exception {
        Session s = cell.newSession();
        Handle e = s.open("/java-ephemeral", OpenOptions.readWrite().create(CreateMode.CREATE_NEW).ephemeral(true));
        Sequencer seq = e.tryAcquire(LockMode.EXCLUSIVE);
        s.close();
        check(s.state() == SessionState.CLOSED, "a closed session is CLOSED");
        fails(ChubbyException.Kind.CLOSED, null, "calls of a closed session fail", e::stat);
        s.close(); // twice: nothing
        try (Session t = cell.newSession()) {
            fails(ChubbyException.Kind.CELL, ErrorCode.NOT_FOUND, "the closed session's ephemeral file is gone",
                    () -> t.open("/java-ephemeral"));
            check(!cell.checkSequencer(seq).valid(), "and its lock released");
        }
    }

    // ------------------------------------------------------------------

    static void notMaster(String nonMaster, String master) throws Exception {
        // Lazy, and given only a replica that is not the master: the first
        // call is refused with NOT_MASTER naming the master, and goes there.
        try (Cell cell = Cell.connect(List.of(nonMaster), new CellOptions().lazy(true))) {
            check(cell.currentMaster().equals(nonMaster), "lazy connect asks nothing: calls go to " + nonMaster);
            try (Session s = cell.newSession()) {
                check(cell.currentMaster().equals(master), "CreateSession reached the master " + cell.currentMaster());
                check(cell.master.hintsFollowed() >= 1 && cell.master.roundsEnded() == 0,
                        "by following NOT_MASTER's master_address (" + cell.master.hintsFollowed()
                                + " hints followed), not by asking every replica (" + cell.master.roundsEnded() + " rounds)");
                Handle h = s.open("/java-nm", OpenOptions.readWrite().create(CreateMode.CREATE_NEW));
                h.write(bytes("via the master"));
                check(h.read().text().equals("via the master"), "calls go on at the master");
                h.close();
            }
        }
        // Connect finds the master from a non-master first in the list, and
        // learns the other replicas.
        try (Cell cell = Cell.connect(List.of(nonMaster))) {
            check(cell.currentMaster().equals(master), "connect finds the master from a non-master: " + cell.currentMaster());
            check(cell.replicas().size() == 3 && cell.replicas().contains(master),
                    "and learns the cell's replicas: " + cell.replicas());
        }
    }

    static void failover(List<String> addrs) throws Exception {
        CellOptions opts = new CellOptions().gracePeriod(Duration.ofSeconds(30));
        try (Cell cell = Cell.connect(addrs, opts); Session s = cell.newSession()) {
            BlockingQueue<SessionEvent> evs = new LinkedBlockingQueue<>();
            s.addListener((ss, ev) -> {
                System.out.println("session event: " + ev.kind() + " epoch " + ev.epoch());
                evs.add(ev);
            });
            Lock l = s.lock("/java-failover", LockMode.EXCLUSIVE, Duration.ofSeconds(10), Duration.ZERO);
            Handle w = s.open("/java-failover-data", OpenOptions.readWrite().create(CreateMode.OPEN_OR_CREATE));
            long epoch0 = s.epoch();
            String master0 = cell.currentMaster();
            long ts0 = cell.timestamps(100);

            // A writer that goes on through the failover: compare-and-swap
            // writes, each expecting the generation the last one produced, so
            // a write applied twice (or lost) shows as a mismatch.
            AtomicBoolean stop = new AtomicBoolean();
            CopyOnWriteArrayList<String> errs = new CopyOnWriteArrayList<>();
            AtomicInteger written = new AtomicInteger();
            long gen0 = w.stat().contentGeneration();
            Thread writer = new Thread(() -> {
                long gen = gen0;
                for (int i = 1; !stop.get() && i < 100_000; i++) {
                    try {
                        Stat st = w.write(bytes("n=" + i), gen);
                        if (st.contentGeneration() != gen + 1) {
                            errs.add("write " + i + ": generation " + st.contentGeneration() + ", want " + (gen + 1));
                        }
                        gen = st.contentGeneration();
                        written.set(i);
                        Thread.sleep(20);
                    } catch (ChubbyException e) {
                        errs.add("write " + i + ": " + e.getMessage());
                        return;
                    } catch (InterruptedException e) {
                        return;
                    }
                }
            });
            writer.start();
            // A caching reader in another client: a read that starts after
            // write i returned never sees less, across the failover too (the
            // new master knows no cachers: the reader flushes).
            Cell rcell = Cell.connect(addrs, opts);
            Session rs = rcell.newSession();
            Handle rh = rs.open("/java-failover-data");
            AtomicLong reads = new AtomicLong();
            Thread reader = new Thread(() -> {
                while (!stop.get()) {
                    try {
                        int before = written.get();
                        long g = rh.read().stat().contentGeneration();
                        if (g < gen0 + before) {
                            errs.add("read generation " + g + " after write " + before + " (generation " + (gen0 + before) + ") returned");
                        }
                        reads.incrementAndGet();
                        Thread.sleep(1); // hits take microseconds: leave the machine's CPUs to the cell
                    } catch (ChubbyException e) {
                        errs.add("read: " + e.getMessage());
                        return;
                    } catch (InterruptedException e) {
                        return;
                    }
                }
            });
            reader.start();
            Thread.sleep(200);
            System.out.println("LOCKED " + l.sequencer().format() + " master " + master0);
            System.out.flush();
            line("STOPPED");
            int atStop = written.get();

            // The session survives: a call after the failover succeeds, and
            // the session hears of the new master on its KeepAlive (which the
            // new master may park for most of a lease).
            Stat st = w.stat();
            check(st != null && s.error() == null, "a call after the failover succeeds; the session lives");
            long ts1 = cell.timestamp();
            check(ts1 > ts0 + 99, "a timestamp from the new master (" + ts1 + ") is above the old one's (" + ts0 + "..+99)");
            List<SessionEvent> seen = await(evs, SessionEvent.Kind.MASTER_CHANGED, Duration.ofSeconds(10));
            if (seen.stream().anyMatch(ev -> ev.kind() == SessionEvent.Kind.JEOPARDY)) {
                // The failover outlasted the local lease: the reply that
                // named the new master also makes the session safe again.
                seen.addAll(await(evs, SessionEvent.Kind.SAFE, Duration.ofSeconds(10)));
            }
            check(s.state() == SessionState.SAFE && s.epoch() > epoch0 && !cell.currentMaster().equals(master0),
                    "a new master serves the session: " + cell.currentMaster() + " epoch " + s.epoch() + " (was " + master0
                            + " epoch " + epoch0 + "); heard " + seen);
            SequencerCheck ck = l.check();
            check(ck.valid(), "the lock is still held: CheckSequencer at the new master says valid");
            for (long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                    written.get() < atStop + 10 && errs.isEmpty() && System.nanoTime() < end; ) {
                Thread.sleep(20);
            }
            stop.set(true);
            writer.join(30_000);
            reader.join(30_000);
            check(errs.isEmpty(), "the writer and the caching reader never failed across the failover: " + errs);
            int n = written.get();
            Contents c = w.read();
            check(n > atStop && c.text().equals("n=" + n) && c.stat().contentGeneration() == gen0 + n,
                    n + " compare-and-swap writes, " + (n - atStop) + " after the failover, each applied once (generation "
                            + c.stat().contentGeneration() + ")");
            CacheStats cs = rs.cacheStats();
            check(rh.read().text().equals("n=" + n) && cs.hits() > 0 && cs.invalidations() > 0,
                    reads.get() + " reads by the caching reader, none stale, and it reads the last write: " + cs);
            rs.close();
            rcell.close();
            Sequencer seq = l.sequencer();
            l.close();
            check(!cell.checkSequencer(seq).valid(), "the lock is released at the new master");
        }
    }

    /** Waits (bounded) for an event of kind on q, and returns the events before it too. */
    private static List<SessionEvent> await(BlockingQueue<SessionEvent> q, SessionEvent.Kind kind, Duration within)
            throws InterruptedException {
        List<SessionEvent> seen = new ArrayList<>();
        for (long end = System.nanoTime() + within.toNanos(); System.nanoTime() < end; ) {
            SessionEvent ev = q.poll(50, TimeUnit.MILLISECONDS);
            if (ev != null) {
                seen.add(ev);
                if (ev.kind() == kind) {
                    return seen;
                }
            }
        }
        throw new Failed("no " + kind + " within " + within + "; heard " + seen);
    }

    static void jeopardy(List<String> addrs) throws Exception {
        try (Cell cell = Cell.connect(addrs, new CellOptions().gracePeriod(Duration.ofSeconds(30)));
                Cell noGrace = Cell.connect(addrs, new CellOptions().gracePeriod(Duration.ZERO));
                Session a = cell.newSession();
                Session b = noGrace.newSession()) {
            BlockingQueue<SessionEvent> evA = new LinkedBlockingQueue<>(), evB = new LinkedBlockingQueue<>();
            a.addListener((s, ev) -> evA.add(ev));
            b.addListener((s, ev) -> evB.add(ev));
            Lock l = a.lock("/java-jeopardy", LockMode.EXCLUSIVE, Duration.ofSeconds(10), Duration.ZERO);
            Handle w = a.open("/java-jeopardy-data", OpenOptions.readWrite().create(CreateMode.CREATE_NEW));
            long epoch0 = a.epoch();
            System.out.println("READY " + l.sequencer().format());
            System.out.flush();
            line("STOPPED");

            List<SessionEvent> seen = await(evA, SessionEvent.Kind.JEOPARDY, Duration.ofSeconds(15));
            check(a.state() == SessionState.JEOPARDY && a.leaseRemaining().isZero() && a.error() == null,
                    "the cell stopped: the session is in jeopardy, not ended (" + seen + ")");
            await(evB, SessionEvent.Kind.EXPIRED, Duration.ofSeconds(15));
            check(b.state() == SessionState.EXPIRED && b.error().is(ErrorCode.SESSION_EXPIRED),
                    "a session without a grace period expired: " + b.error().getMessage());
            fails(ChubbyException.Kind.LOCAL, ErrorCode.SESSION_EXPIRED, "calls of an expired session fail",
                    () -> b.open("/"));
            // A call made in jeopardy waits until the session is safe again.
            CompletableFuture<Stat> waiting = CompletableFuture.supplyAsync(() -> {
                try {
                    return w.write(bytes("written in jeopardy"));
                } catch (ChubbyException e) {
                    throw new RuntimeException(e);
                }
            });
            Thread.sleep(300);
            check(!waiting.isDone(), "a write made in jeopardy waits");
            System.out.println("JEOPARDY");
            System.out.flush();
            line("RESTARTED");

            seen = await(evA, SessionEvent.Kind.SAFE, Duration.ofSeconds(30));
            check(seen.size() >= 2 && seen.get(seen.size() - 2).kind() == SessionEvent.Kind.MASTER_CHANGED
                    && a.epoch() > epoch0, "the new master made it safe again, MASTER_CHANGED first: " + seen);
            check(a.state() == SessionState.SAFE && a.leaseRemaining().toMillis() > 0, "the session is safe");
            Stat st = waiting.get(20, TimeUnit.SECONDS);
            check(st.contentGeneration() == 2 && w.read().text().equals("written in jeopardy"),
                    "the write made in jeopardy went through, once");
            check(l.check().valid(), "the lock survived: CheckSequencer says valid");
            check(a.epoch() > epoch0 && evB.isEmpty(), "the expired session heard nothing more");
            l.close();
        }
    }

    static void holder(List<String> addrs, String path) throws Exception {
        Cell cell = Cell.connect(addrs);
        Session s = cell.newSession();
        // No lock-delay: the lock is free as soon as the session expires.
        Lock l = s.lock(path, LockMode.EXCLUSIVE, Duration.ofSeconds(10), Duration.ZERO);
        System.out.println("LOCKED " + l.sequencer().format());
        System.out.flush();
        // Hold it until killed (the test sends SIGKILL; stdin ends with the test).
        while (STDIN.readLine() != null) {
            // nothing
        }
        throw new Failed("the holder was not killed");
    }

    static void waiter(List<String> addrs, String path) throws Exception {
        try (Cell cell = Cell.connect(addrs); Session s = cell.newSession()) {
            fails(ChubbyException.Kind.CELL, ErrorCode.LOCK_HELD, "the lock is held while its holder runs",
                    () -> s.tryLock(path));
            System.out.println("HELD");
            System.out.flush();
            String go = line("GO ");
            Sequencer old = Sequencer.parse(go.substring(3));
            long t0 = System.nanoTime();
            try (Lock l = s.lock(path, Duration.ofSeconds(30))) {
                long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
                check(l.sequencer().lockGeneration() > old.lockGeneration(),
                        "the killed holder's lock was released when its session expired; acquired after " + ms + " ms: "
                                + l.sequencer().format());
                check(!cell.checkSequencer(old).valid(), "the killed holder's sequencer is invalid");
            }
        }
    }
}
