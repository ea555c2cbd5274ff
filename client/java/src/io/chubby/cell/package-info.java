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
 * (safe, jeopardy, grace period, expired), exactly-once request ids and
 * event delivery; it does not cache.
 *
 * <pre>{@code
 * try (Cell cell = Cell.connect(List.of("127.0.0.1:7000"));
 *      Session s = cell.newSession();
 *      Lock l = s.lock("/svc/leader")) {
 *     System.out.println("leading with " + l.sequencer().format());
 * }
 * }</pre>
 */
package io.chubby.cell;
