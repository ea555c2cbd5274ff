package io.chubby.cell;

import static io.chubby.cell.CellTest.bytes;
import static io.chubby.cell.CellTest.check;
import static io.chubby.cell.CellTest.fails;

import chubby.CreateMode;
import chubby.ErrorCode;
import chubby.chubbyConstants;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * CellTest's scenarios of the calls that came with issue 26: the oracle,
 * WhoAmI, Multi, ACLs and TLS.
 */
final class Features {
    private Features() {}

    /** The oracle, WhoAmI, Multi and SetACL on a plaintext cell without ACLs. */
    static void plain(List<String> addrs) throws Exception {
        try (Cell cell = Cell.connect(addrs)) {
            oracle(cell);
            Identity id = cell.whoAmI();
            check(id.principal().equals("anonymous") && !id.tls(), "whoAmI on a plaintext cell: " + id);
            try (Session s = cell.newSession()) {
                multi(cell, s);
                aclOpenCell(s);
            }
        }
    }

    static void oracle(Cell cell) throws Exception {
        fails(ChubbyException.Kind.LOCAL, ErrorCode.INVALID_ARGUMENT, "timestamps(0)", () -> cell.timestamps(0));
        fails(ChubbyException.Kind.LOCAL, ErrorCode.INVALID_ARGUMENT, "timestamps over the limit",
                () -> cell.timestamps(chubbyConstants.MAX_TIMESTAMPS_PER_CALL + 1));
        long a = cell.timestamp();
        long b = cell.timestamps(10);
        long c = cell.timestamp();
        check(a > 0 && b > a && c >= b + 10, "timestamps increase: " + a + ", " + b + "..+9, " + c);

        // Concurrent takers never share a timestamp, and each one's own
        // timestamps increase.
        ConcurrentHashMap<Long, Boolean> seen = new ConcurrentHashMap<>();
        CopyOnWriteArrayList<String> errs = new CopyOnWriteArrayList<>();
        List<Thread> ts = new ArrayList<>();
        for (int t = 0; t < 4; t++) {
            Thread th = new Thread(() -> {
                long last = 0;
                for (int i = 0; i < 50; i++) {
                    try {
                        long first = cell.timestamps(3);
                        for (long x = first; x < first + 3; x++) {
                            if (seen.putIfAbsent(x, true) != null) {
                                errs.add("timestamp " + x + " handed out twice");
                            }
                        }
                        if (first <= last) {
                            errs.add("timestamp " + first + " after " + last);
                        }
                        last = first + 2;
                    } catch (ChubbyException e) {
                        errs.add(e.getMessage());
                    }
                }
            });
            th.start();
            ts.add(th);
        }
        for (Thread th : ts) {
            th.join(60_000);
        }
        check(errs.isEmpty() && seen.size() == 600, "4 threads × 50 calls × 3: 600 distinct timestamps " + errs);
        check(cell.timestamp() > c + 600, "and a later one is above them all");

        // Many takers at once are batched: fewer GetTimestamps than calls.
        long calls0 = cell.ts.calls.get();
        ConcurrentHashMap<Long, Boolean> seen8 = new ConcurrentHashMap<>();
        List<Thread> t8 = new ArrayList<>();
        for (int t = 0; t < 8; t++) {
            Thread th = new Thread(() -> {
                for (int i = 0; i < 100; i++) {
                    try {
                        long x = cell.timestamp();
                        if (seen8.putIfAbsent(x, true) != null) {
                            errs.add("timestamp " + x + " handed out twice");
                        }
                    } catch (ChubbyException e) {
                        errs.add(e.getMessage());
                    }
                }
            });
            th.start();
            t8.add(th);
        }
        for (Thread th : t8) {
            th.join(60_000);
        }
        long calls = cell.ts.calls.get() - calls0;
        check(errs.isEmpty() && seen8.size() == 800 && calls < 800,
                "8 threads × 100 timestamps: 800 distinct in " + calls + " GetTimestamps calls " + errs);
    }

    static void multi(Cell cell, Session s) throws Exception {
        // Bad input is refused before anything is sent.
        fails(ChubbyException.Kind.LOCAL, ErrorCode.INVALID_ARGUMENT, "multi with null ops", () -> s.multi(List.of(), null));
        fails(ChubbyException.Kind.LOCAL, ErrorCode.INVALID_ARGUMENT, "multi with a bad path",
                () -> s.multi(List.of(), List.of(Op.create("no-slash", null))));
        List<Op> many = new ArrayList<>();
        for (int i = 0; i <= chubbyConstants.MAX_MULTI_OPS; i++) {
            many.add(Op.create("/m" + i, null));
        }
        fails(ChubbyException.Kind.LOCAL, ErrorCode.INVALID_ARGUMENT, "multi with too many ops", () -> s.multi(List.of(), many));
        byte[] big = new byte[chubbyConstants.MAX_CONTENT_BYTES];
        List<Op> heavy = new ArrayList<>();
        for (int i = 0; i < 5; i++) {
            heavy.add(Op.create("/heavy" + i, big));
        }
        fails(ChubbyException.Kind.LOCAL, ErrorCode.TOO_LARGE, "multi over MAX_MULTI_BYTES", () -> s.multi(List.of(), heavy));

        // A directory, then a file in it (later ops see earlier ones), all at once.
        MultiResult r = s.multi(List.of(Cmp.notExists("/jm")),
                List.of(Op.mkdir("/jm"), Op.create("/jm/a", bytes("a1")), Op.create("/jm/b", bytes("b1"))));
        check(r.succeeded() && r.failedCompare() == -1 && r.stats().size() == 3 && r.stats().get(0).isDirectory()
                && r.stats().get(1).path().equals("/jm/a"), "multi: mkdir and two creates applied: " + r);
        long genA = r.stats().get(1).contentGeneration();
        long instB = r.stats().get(2).instance();

        // A compare that does not hold: an answer naming it; nothing applied.
        r = s.multi(List.of(Cmp.exists("/jm"), Cmp.generation("/jm/a", genA + 7)),
                List.of(Op.set("/jm/a", bytes("a2")), Op.delete("/jm/b", false)));
        check(!r.succeeded() && r.failedCompare() == 1 && r.stats().isEmpty(), "a compare that fails: index 1, not applied");
        try (Handle a = s.open("/jm/a"); Handle b = s.open("/jm/b")) {
            check(a.read().text().equals("a1") && b.stat() != null, "and nothing changed");
        }

        // An op that cannot be applied refuses the whole request.
        ChubbyException e = fails(ChubbyException.Kind.CELL, ErrorCode.EXISTS, "multi whose second op finds its node",
                () -> s.multi(List.of(), List.of(Op.set("/jm/a", bytes("a3")), Op.create("/jm/b", null))));
        check(e.reason().startsWith("op 1:"), "the error names the op: " + e.reason());
        try (Handle a = s.open("/jm/a")) {
            check(a.read().text().equals("a1"), "and the first op was not applied");
        }

        // Compares that hold: compare-and-swap over two files at once.
        r = s.multi(List.of(Cmp.generation("/jm/a", genA), Cmp.instance("/jm/b", instB)),
                List.of(Op.setIf("/jm/a", bytes("a2"), genA), Op.delete("/jm/b", false), Op.createEphemeral("/jm/e", null)));
        check(r.succeeded() && r.stats().get(0).contentGeneration() == genA + 1 && r.stats().get(2).ephemeral(),
                "compare-and-swap of two files and an ephemeral create: applied");
        fails(ChubbyException.Kind.CELL, ErrorCode.NOT_FOUND, "the deleted file is gone", () -> s.open("/jm/b"));

        // Exactly-once: a Multi whose reply was lost is resent and applied once
        // (a second CREATE would be EXISTS, a second setIf a mismatch).
        AtomicBoolean armed = new AtomicBoolean(true);
        AtomicInteger dropped = new AtomicInteger();
        Cell.dropReply = op -> {
            if (op.equals("multi") && armed.getAndSet(false)) {
                dropped.incrementAndGet();
                return true;
            }
            return false;
        };
        try {
            r = s.multi(List.of(), List.of(Op.create("/jm/once", null), Op.setIf("/jm/a", bytes("a3"), genA + 1)));
        } finally {
            Cell.dropReply = null;
        }
        check(dropped.get() == 1 && r.succeeded() && r.stats().get(1).contentGeneration() == genA + 2,
                "a Multi whose reply was lost: resent, applied once");
        s.multi(List.of(), List.of(Op.delete("/jm", true)));
        fails(ChubbyException.Kind.CELL, ErrorCode.NOT_FOUND, "a recursive delete in a Multi", () -> s.open("/jm"));
    }

    /** SetACL on a cell without ACLs: names are set and compared, every right still granted. */
    static void aclOpenCell(Session s) throws Exception {
        try (Handle h = s.open("/jacl", OpenOptions.readWrite().create(CreateMode.OPEN_OR_CREATE))) {
            Stat st = h.stat();
            check(st.acl().equals(Acl.OPEN), "a new node on a cell without ACLs names none: " + st.acl());
            fails(ChubbyException.Kind.LOCAL, ErrorCode.INVALID_ARGUMENT, "an ACL name with a slash",
                    () -> h.setAcl(new Acl("a/b", "", ""), null));
            fails(ChubbyException.Kind.LOCAL, ErrorCode.INVALID_ARGUMENT, "a null ACL", () -> h.setAcl(null, null));
            Stat after = h.setAcl(new Acl("", "writers", ""), st.aclGeneration());
            check(after.aclGeneration() == st.aclGeneration() + 1 && after.acl().write().equals("writers"),
                    "setAcl with the right generation: acl_generation +1, names set");
            check(h.stat().acl().equals(new Acl("", "writers", "")), "and a stat shows them");
            fails(ChubbyException.Kind.CELL, ErrorCode.GENERATION_MISMATCH, "setAcl with a stale generation",
                    () -> h.setAcl(Acl.OPEN, st.aclGeneration()));
            h.setAcl(Acl.OPEN, null);
            h.delete();
        }
    }

    // ------------------------------------------------------------------

    /**
     * Mutual TLS against a cell with ACLs whose administrator is "admin":
     * the environment names admin's certificate; dir holds ca.crt,
     * bob.crt/.key and carol.crt/.key of the same CA, other the CA file of
     * another CA.
     */
    static void tls(String addr, Path dir, Path otherCA) throws Exception {
        Path ca = dir.resolve("ca.crt");
        List<String> addrs = List.of(addr);
        CellOptions quick = new CellOptions().callTimeout(java.time.Duration.ofSeconds(5));

        // Files that cannot be used are refused at once, naming why.
        Path scratch = Files.createTempDirectory(dir, "scratch"); // in the test's directory, removed with it
        Path sec1 = scratch.resolve("old.key");
        Files.writeString(sec1, "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----\n", StandardCharsets.US_ASCII);
        ChubbyException e = fails(ChubbyException.Kind.LOCAL, ErrorCode.INVALID_ARGUMENT, "a SEC1 EC key",
                () -> Tls.fromFiles(ca, dir.resolve("bob.crt"), sec1, null));
        check(e.getMessage().contains("openssl pkcs8 -topk8"), "the error says how to convert it");
        fails(ChubbyException.Kind.LOCAL, ErrorCode.INVALID_ARGUMENT, "a key that is not the certificate's",
                () -> Tls.fromFiles(ca, dir.resolve("bob.crt"), dir.resolve("admin.key"), null));
        fails(ChubbyException.Kind.LOCAL, ErrorCode.INVALID_ARGUMENT, "a certificate without its key",
                () -> Tls.fromFiles(ca, dir.resolve("bob.crt"), null, null));
        fails(ChubbyException.Kind.LOCAL, ErrorCode.INVALID_ARGUMENT, "a missing CA file",
                () -> Tls.fromFiles(scratch.resolve("none.crt"), null, null, null));
        fails(ChubbyException.Kind.LOCAL, ErrorCode.INVALID_ARGUMENT, "a CA file without certificates",
                () -> Tls.fromFiles(sec1, null, null, null));
        check(Tls.fromEnv(k -> null) == null, "no CHUBBY_TLS_CA: plaintext");
        fails(ChubbyException.Kind.LOCAL, ErrorCode.INVALID_ARGUMENT, "CHUBBY_TLS_CERT without CHUBBY_TLS_CA",
                () -> Tls.fromEnv(k -> k.equals(Tls.ENV_CERT) ? "x.crt" : null));

        // A replica whose certificate another CA signed is not the cell.
        fails(ChubbyException.Kind.UNREACHABLE, null, "a cell whose certificate our CA did not sign",
                () -> Cell.connect(addrs, quick.copy().tls(Tls.fromFiles(otherCA, null, null, null))));
        // A required server name the replica's certificate lacks.
        fails(ChubbyException.Kind.UNREACHABLE, null, "a server name the certificate does not carry",
                () -> Cell.connect(addrs, quick.copy().tls(Tls.fromFiles(ca, null, null, "db.example"))));

        // Files renewed on disk are followed: the same context, on a new
        // connection after the next check, presents the new certificate; a
        // file that cannot be used keeps what was read before.
        Path rotCrt = scratch.resolve("rot.crt"), rotKey = scratch.resolve("rot.key");
        Files.copy(dir.resolve("bob.crt"), rotCrt);
        Files.copy(dir.resolve("bob.key"), rotKey);
        javax.net.ssl.SSLContext rot = Tls.fromFiles(ca, rotCrt, rotKey, null);
        try (Cell c1 = Cell.connect(addrs, quick.copy().tls(rot))) {
            check(c1.whoAmI().principal().equals("bob"), "a context of files holding bob's certificate: bob");
        }
        Files.copy(dir.resolve("carol.key"), scratch.resolve("rot.key.tmp"));
        Files.move(scratch.resolve("rot.key.tmp"), rotKey, java.nio.file.StandardCopyOption.REPLACE_EXISTING,
                java.nio.file.StandardCopyOption.ATOMIC_MOVE);
        Files.copy(dir.resolve("carol.crt"), scratch.resolve("rot.crt.tmp"));
        Files.move(scratch.resolve("rot.crt.tmp"), rotCrt, java.nio.file.StandardCopyOption.REPLACE_EXISTING,
                java.nio.file.StandardCopyOption.ATOMIC_MOVE);
        Thread.sleep(Tls.CHECK_INTERVAL_NANOS / 1_000_000 + 100);
        try (Cell c2 = Cell.connect(addrs, quick.copy().tls(rot))) {
            check(c2.whoAmI().principal().equals("carol"), "the files renewed as carol's: the same context is carol");
        }
        Files.writeString(rotKey, "half written", StandardCharsets.US_ASCII);
        Thread.sleep(Tls.CHECK_INTERVAL_NANOS / 1_000_000 + 100);
        try (Cell c3 = Cell.connect(addrs, quick.copy().tls(rot))) {
            check(c3.whoAmI().principal().equals("carol"), "a key file that cannot be read: carol's material is kept");
        }

        // The environment (CHUBBY_TLS_*, as the Go client reads it) names admin.
        try (Cell admin = Cell.connect(addrs, quick);
                Cell bob = Cell.connect(addrs, quick.copy().tls(Tls.fromFiles(ca, dir.resolve("bob.crt"), dir.resolve("bob.key"), "localhost")));
                Cell anon = Cell.connect(addrs, quick.copy().tls(Tls.fromFiles(ca, null, null, "127.0.0.1")))) {
            check(admin.whoAmI().equals(new Identity("admin", true)), "whoAmI from CHUBBY_TLS_*: admin over TLS");
            check(bob.whoAmI().equals(new Identity("bob", true)), "whoAmI with bob's files (server name localhost): bob");
            check(anon.whoAmI().equals(new Identity("anonymous", true)), "whoAmI without a certificate: anonymous over TLS");
            oracle(admin);
            try (Session as = admin.newSession(); Session bs = bob.newSession(); Session ns = anon.newSession()) {
                acl(as, bs, ns);
            }
        }
    }

    /** ACLs enforced: admin grants every certificate read on /pub, nobody else write. */
    static void acl(Session admin, Session bob, Session anon) throws Exception {
        // The cell names admin once its master has initialised the ACLs.
        Stat root = null;
        for (int i = 0; i < 200; i++) {
            try (Handle r = admin.open("/")) {
                root = r.stat();
                if (root.acl().changeAcl().equals("admin")) {
                    break;
                }
            }
            Thread.sleep(50);
        }
        check(root != null && root.acl().equals(new Acl("admin", "admin", "admin")), "/ is admin's: " + (root == null ? null : root.acl()));
        fails(ChubbyException.Kind.CELL, ErrorCode.PERMISSION_DENIED, "bob may not read /", () -> bob.open("/"));

        admin.createFile("/acl/everyone", bytes("*\n"), false);
        admin.mkdir("/pub", false);
        try (Handle pub = admin.open("/pub", OpenOptions.readWrite())) {
            Stat st = pub.setAcl(new Acl("everyone", "admin", "admin"), null);
            check(st.acl().read().equals("everyone"), "admin sets /pub's read ACL to everyone");
        }
        admin.createFile("/pub/f", bytes("hello"), false);
        try (Handle f = bob.open("/pub/f")) {
            check(f.read().text().equals("hello") && f.lastStat().acl().read().equals("everyone"),
                    "bob reads /pub/f (it got its parent's names)");
            fails(ChubbyException.Kind.CELL, ErrorCode.PERMISSION_DENIED, "bob may not change its ACL",
                    () -> f.setAcl(Acl.OPEN, null));
        }
        fails(ChubbyException.Kind.CELL, ErrorCode.PERMISSION_DENIED, "bob may not open it for writing",
                () -> bob.open("/pub/f", OpenOptions.readWrite()));
        fails(ChubbyException.Kind.CELL, ErrorCode.PERMISSION_DENIED, "bob may not create in /pub",
                () -> bob.createFile("/pub/g", null, false));
        fails(ChubbyException.Kind.CELL, ErrorCode.PERMISSION_DENIED, "nor through a Multi",
                () -> bob.multi(List.of(), List.of(Op.set("/pub/f", bytes("mine")))));
        fails(ChubbyException.Kind.CELL, ErrorCode.PERMISSION_DENIED, "anonymous is not every certificate (*)",
                () -> anon.open("/pub/f"));

        try (Handle f = admin.open("/pub/f", OpenOptions.readWrite())) {
            long g = f.stat().aclGeneration();
            fails(ChubbyException.Kind.CELL, ErrorCode.GENERATION_MISMATCH, "setAcl with a stale generation",
                    () -> f.setAcl(new Acl("admin", "admin", "admin"), g + 1));
            f.setAcl(new Acl("admin", "admin", "admin"), g);
        }
        fails(ChubbyException.Kind.CELL, ErrorCode.PERMISSION_DENIED, "after admin takes the read right back, bob may not read",
                () -> bob.open("/pub/f"));
    }

    // ------------------------------------------------------------------

    /** The time since start, in ms. */
    private static long since(long start) {
        return (System.nanoTime() - start) / 1_000_000;
    }

    /** Waits (bounded) for f and returns the ChubbyException it failed with, or null. */
    private static Throwable failure(java.util.concurrent.Future<?> f, long withinMs) throws Exception {
        try {
            f.get(withinMs, java.util.concurrent.TimeUnit.MILLISECONDS);
            return null;
        } catch (java.util.concurrent.ExecutionException e) {
            return e.getCause();
        }
    }

    /** Deadlines and cancellation: a blocked call is abandoned, a retry loop cut short. */
    static void deadlines(List<String> addrs) throws Exception {
        // A server that accepts connections and never answers: a call to it
        // blocks in its read until its 60 s timeout, unless abandoned.
        try (java.net.ServerSocket silent = new java.net.ServerSocket(0, 50, java.net.InetAddress.getLoopbackAddress());
                Cell mute = Cell.connect(List.of("127.0.0.1:" + silent.getLocalPort()),
                        new CellOptions().lazy(true).callTimeout(java.time.Duration.ofSeconds(60)))) {
            List<java.net.Socket> accepted = new CopyOnWriteArrayList<>();
            Thread acceptor = new Thread(() -> {
                try {
                    while (true) {
                        accepted.add(silent.accept());
                    }
                } catch (java.io.IOException e) {
                    // closed: the test is over
                }
            });
            acceptor.setDaemon(true);
            acceptor.start();

            fails(ChubbyException.Kind.LOCAL, ErrorCode.INVALID_ARGUMENT, "a zero deadline",
                    () -> mute.withDeadline(java.time.Duration.ZERO, mute::getMaster));
            check(failure(mute.async(null, mute::getMaster), 5000) instanceof ChubbyException, "async with a null timeout fails");

            long start = System.nanoTime();
            ChubbyException e = fails(ChubbyException.Kind.DEADLINE_EXCEEDED, null, "a silent replica, deadline 300 ms",
                    () -> mute.withDeadline(java.time.Duration.ofMillis(300), mute::getMaster));
            long took = since(start);
            check(took < 10_000, "it gave up after " + took + " ms (the call's own timeout: 60 s)");
            check(!Thread.currentThread().isInterrupted(), "and left the caller's thread not interrupted");

            // Cancel: the blocked read ends at once, the body sees CANCELLED.
            java.util.concurrent.CompletableFuture<ChubbyException.Kind> seen = new java.util.concurrent.CompletableFuture<>();
            java.util.concurrent.CompletableFuture<MasterInfo> f = mute.async(() -> {
                try {
                    return mute.getMaster();
                } catch (ChubbyException x) {
                    seen.complete(x.kind());
                    throw x;
                }
            });
            int before = accepted.size();
            for (int i = 0; i < 200 && accepted.size() == before; i++) {
                Thread.sleep(10);
            }
            Thread.sleep(100); // the request is written, the read blocks
            start = System.nanoTime();
            check(f.cancel(true) && f.isCancelled(), "the future is cancelled");
            ChubbyException.Kind k = seen.get(10, java.util.concurrent.TimeUnit.SECONDS);
            took = since(start);
            check(k == ChubbyException.Kind.CANCELLED && took < 10_000,
                    "the cancelled call was abandoned after " + took + " ms: " + k);

            // orTimeout completes the future from outside: that abandons it too.
            java.util.concurrent.CompletableFuture<ChubbyException.Kind> seen2 = new java.util.concurrent.CompletableFuture<>();
            start = System.nanoTime();
            Throwable t = failure(mute.async(() -> {
                try {
                    return mute.getMaster();
                } catch (ChubbyException x) {
                    seen2.complete(x.kind());
                    throw x;
                }
            }).orTimeout(300, java.util.concurrent.TimeUnit.MILLISECONDS), 20_000);
            check(t instanceof java.util.concurrent.TimeoutException, "orTimeout: " + t);
            k = seen2.get(10, java.util.concurrent.TimeUnit.SECONDS);
            check(k == ChubbyException.Kind.CANCELLED, "and the call was abandoned (" + k + ") after " + since(start) + " ms");

            // A timestamp's caller stops waiting for its batch at the deadline.
            start = System.nanoTime();
            fails(ChubbyException.Kind.DEADLINE_EXCEEDED, null, "a timestamp from a silent replica, deadline 300 ms",
                    () -> mute.withDeadline(java.time.Duration.ofMillis(300), mute::timestamp));
            took = since(start);
            check(took < 10_000, "it gave up after " + took + " ms");

            // async with a deadline: the future fails at the deadline.
            start = System.nanoTime();
            t = failure(mute.async(java.time.Duration.ofMillis(300), mute::getMaster), 20_000);
            took = since(start);
            check(t instanceof ChubbyException && ((ChubbyException) t).kind() == ChubbyException.Kind.DEADLINE_EXCEEDED
                    && took < 10_000, "async with a 300 ms deadline fails after " + took + " ms: " + t);
        }

        // Nobody listening: the deadline cuts the retries (6 attempts with
        // a backoff doubling to 1 s) short.
        int dead;
        try (java.net.ServerSocket ss = new java.net.ServerSocket(0, 50, java.net.InetAddress.getLoopbackAddress())) {
            dead = ss.getLocalPort();
        }
        try (Cell gone = Cell.connect(List.of("127.0.0.1:" + dead), new CellOptions().lazy(true))) {
            long start = System.nanoTime();
            fails(ChubbyException.Kind.UNREACHABLE, null, "no deadline: the retries run out", gone::getMaster);
            long full = since(start);
            start = System.nanoTime();
            fails(ChubbyException.Kind.DEADLINE_EXCEEDED, null, "a 100 ms deadline",
                    () -> gone.withDeadline(java.time.Duration.ofMillis(100), gone::getMaster));
            long cut = since(start);
            check(cut < full, "the deadline ended the retries after " + cut + " ms, not " + full + " ms");
        }

        // An Acquire under a deadline: its wait is cut to it, and a
        // cancelled one ends at once; the session goes on.
        try (Cell cell = Cell.connect(addrs); Session holder = cell.newSession(); Session s = cell.newSession()) {
            Lock held = holder.lock("/jdl");
            try (Handle h = s.open("/jdl")) {
                long start = System.nanoTime();
                try {
                    cell.withDeadline(java.time.Duration.ofMillis(500),
                            () -> h.acquire(chubby.LockMode.EXCLUSIVE, java.time.Duration.ofMinutes(5)));
                    throw new CellTest.Failed("acquire of a held lock under a deadline succeeded");
                } catch (ChubbyException x) {
                    long took = since(start);
                    check((x.kind() == ChubbyException.Kind.DEADLINE_EXCEEDED || x.is(ErrorCode.TIMED_OUT)) && took < 10_000,
                            "acquire (wait 5 min) under a 500 ms deadline ends after " + took + " ms: " + x.getMessage());
                }
                java.util.concurrent.CompletableFuture<chubby.LockMode> seen = new java.util.concurrent.CompletableFuture<>();
                java.util.concurrent.CompletableFuture<Sequencer> f = cell.async(() -> {
                    try {
                        return h.acquire(chubby.LockMode.EXCLUSIVE, java.time.Duration.ofMinutes(5));
                    } finally {
                        seen.complete(chubby.LockMode.EXCLUSIVE);
                    }
                });
                Thread.sleep(300);
                start = System.nanoTime();
                f.cancel(true);
                seen.get(10, java.util.concurrent.TimeUnit.SECONDS);
                check(since(start) < 10_000, "a cancelled acquire (wait 5 min) ended after " + since(start) + " ms");
                check(h.read() != null && s.error() == null, "and the session goes on");
            }
            held.close();
        }
    }

    // ------------------------------------------------------------------

    /**
     * The cache: hits while nothing changes, and never a stale read: a
     * write by another client returns only once the reader's copy is gone.
     */
    static void cache(List<String> addrs) throws Exception {
        try (Cell rc = Cell.connect(addrs); Cell wc = Cell.connect(addrs, new CellOptions().cache(false));
                Session reader = rc.newSession(); Session writer = wc.newSession()) {
            writer.createFile("/jc", bytes("v0"), false);
            try (Handle r = reader.open("/jc"); Handle w = writer.open("/jc", OpenOptions.readWrite())) {
                CacheStats s0 = reader.cacheStats();
                Contents c1 = r.read();
                Contents c2 = r.read();
                Stat st = r.stat();
                CacheStats s1 = reader.cacheStats();
                check(c1.text().equals("v0") && c2.text().equals("v0") && st.contentGeneration() == c1.stat().contentGeneration(),
                        "reads and a stat of an unchanged file");
                check(s1.misses() - s0.misses() == 1 && s1.hits() - s0.hits() == 2 && s1.entries() == 1,
                        "the first read missed, the second and the stat hit: " + s1);
                w.read();
                w.read();
                check(writer.cacheStats().equals(new CacheStats(0, 0, 0, 0)), "a session with cache(false) caches nothing");

                // A write by another client: the reader's next read sees it.
                w.write(bytes("v1"));
                check(r.read().text().equals("v1"), "after another client's write returns, a read sees it");
                CacheStats s2 = reader.cacheStats();
                check(s2.invalidations() > s1.invalidations(), "the reader got an invalidation: " + s2);

                // Many writes while the reader reads: a read that starts after
                // write i returned never sees less than i (a stale hit would).
                AtomicInteger done = new AtomicInteger();
                AtomicBoolean stop = new AtomicBoolean();
                CopyOnWriteArrayList<String> errs = new CopyOnWriteArrayList<>();
                Thread wt = new Thread(() -> {
                    try {
                        for (int i = 1; i <= 40; i++) {
                            w.write(bytes(Integer.toString(i)));
                            done.set(i);
                            Thread.sleep(20);
                        }
                    } catch (Exception e) {
                        errs.add("writer: " + e);
                    } finally {
                        stop.set(true);
                    }
                });
                wt.start();
                long reads = 0;
                while (!stop.get()) {
                    int before = done.get();
                    String v = r.read().text();
                    int got = v.startsWith("v") ? 0 : Integer.parseInt(v);
                    if (got < before) {
                        errs.add("read " + got + " after write " + before + " returned");
                    }
                    reads++;
                }
                wt.join(60_000);
                CacheStats s3 = reader.cacheStats();
                check(errs.isEmpty(), reads + " reads beside 40 writes, none stale: " + errs);
                check(s3.hits() > s2.hits(), "and some were hits: " + s3);

                // Own writes are written through.
                try (Handle rw = reader.open("/jc", OpenOptions.readWrite())) {
                    r.read();
                    rw.write(bytes("mine"));
                    check(r.read().text().equals("mine"), "the reader's own write: its next read sees it");
                }

                // Listings: a hit while nothing changes; another client's new
                // child, write to a child, or delete shows at once.
                writer.mkdir("/jcd", false);
                writer.createFile("/jcd/a", bytes("a"), false);
                try (Handle d = reader.open("/jcd")) {
                    CacheStats l0 = reader.cacheStats();
                    List<DirEntry> e1 = d.readDir();
                    List<DirEntry> e2 = d.readDir();
                    CacheStats l1 = reader.cacheStats();
                    check(e1.equals(e2) && e1.size() == 1 && l1.hits() == l0.hits() + 1 && l1.misses() == l0.misses() + 1,
                            "a listing read twice: one miss, one hit: " + l1);
                    writer.createFile("/jcd/b", bytes("b"), false);
                    check(d.readDir().size() == 2, "another client's new child shows in the next listing");
                    d.readDir();
                    try (Handle wa = writer.open("/jcd/a", OpenOptions.readWrite())) {
                        long g = wa.write(bytes("a2")).contentGeneration();
                        check(d.readDir().get(0).stat().contentGeneration() == g, "a child's write shows in its entry's Stat");
                        d.readDir();
                        wa.delete();
                    }
                    List<DirEntry> e3 = d.readDir();
                    check(e3.size() == 1 && e3.get(0).name().equals("b"), "and a deleted child goes: " + e3);
                    try (Handle own = reader.open("/jcd/b", OpenOptions.readWrite())) {
                        d.readDir();
                        own.delete();
                        check(d.readDir().isEmpty(), "the reader's own delete: its next listing is empty");
                    }
                }

                // The node deleted and re-created: the old handle does not read
                // the new node from the cache.
                r.read();
                w.delete();
                writer.createFile("/jc", bytes("new"), false);
                fails(ChubbyException.Kind.CELL, ErrorCode.HANDLE_INVALID, "a handle to the deleted instance", r::read);
                try (Handle r2 = reader.open("/jc")) {
                    check(r2.read().text().equals("new") && r2.read().text().equals("new"), "a new handle reads the new node");
                }
            }
        }
    }
}
