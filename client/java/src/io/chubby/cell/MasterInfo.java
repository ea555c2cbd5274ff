package io.chubby.cell;

import java.util.List;

/**
 * Where the cell's master is, as a replica answered {@link Cell#getMaster()}.
 *
 * @param address the master's client address (host:port)
 * @param epoch the master's epoch: it grows with every new master
 * @param id the master replica's id
 * @param replicas the client addresses of the configuration's members (those that are well-formed)
 */
public record MasterInfo(String address, long epoch, String id, List<String> replicas) {}
