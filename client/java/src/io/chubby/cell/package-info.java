/**
 * The Java client library of a Chubby lock cell: connect to a cell
 * ({@link io.chubby.cell.Cell#connect(java.util.List)}), keep a session
 * alive ({@link io.chubby.cell.Session}), open nodes
 * ({@link io.chubby.cell.Handle}), read and write their small contents,
 * take their advisory locks ({@link io.chubby.cell.Lock}) and watch their
 * events.
 *
 * <p>It speaks the cell's Apache Thrift interface (idl/chubby.thrift; the
 * generated classes are in package {@code chubby}, whose enums — ErrorCode,
 * LockMode, OpenMode, CreateMode, EventKind, NodeKind — and constants
 * ({@code chubbyConstants}) this API uses) over the strict binary protocol,
 * framed or buffered, one client per service on each connection. It follows
 * the Go client (package client) in finding the master, keeping sessions
 * (safe, jeopardy, grace period, expired), exactly-once request ids,
 * event delivery and the session cache of contents and Stats with the
 * master's invalidations (and of listings). Beside those: mutual
 * TLS ({@link io.chubby.cell.Tls}), ACLs and WhoAmI, Multi, the timestamp
 * oracle, and per-call deadlines and cancellation
 * ({@link io.chubby.cell.Cell#withDeadline}, {@link io.chubby.cell.Cell#async(io.chubby.cell.CellCall)}).
 *
 * <pre>{@code
 * try (Cell cell = Cell.connect(List.of("127.0.0.1:7000"));
 *      Session s = cell.newSession()) {
 *     s.mkdir("/svc", true); // a fresh cell has only "/"
 *     try (Lock l = s.lock("/svc/leader")) {
 *         System.out.println("leading with " + l.sequencer().format());
 *     }
 * }
 * }</pre>
 */
package io.chubby.cell;
