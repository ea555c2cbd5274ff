package io.chubby.cell;

/**
 * Who the cell takes a client for ({@link Cell#whoAmI()}).
 *
 * @param principal the common name of the client's certificate, or
 *     "anonymous" without one (always on a cell without TLS)
 * @param tls whether the connection is TLS
 */
public record Identity(String principal, boolean tls) {}
