// Package discovery is a cell's replica discovery and health channel: each
// replica gossips who it is and where it listens, and learns the others
// and their health, over hashicorp/memberlist (SWIM: random probes, with
// indirect probes through other members before a member is suspected,
// and suspicions that the suspect may refute).
//
// Discovery is advisory. It tells a replica where the others are and
// which seem alive, so that the master can notice a dead replica and how
// long it has been dead (to replace it with a spare), and so that a
// restarted replica finds its peers. It decides nothing: the replication
// protocol's own timers still detect a dead primary, and the membership
// of the replicated configuration is decided by the log, never by gossip.
//
// # Meta
//
// A replica gossips a Meta: its cell's name, its replica id, its client
// and peer addresses, its data directory's identity (DataID, a random
// string made with the data directory, so that a replica whose disk was
// wiped rejoins as a new member), whether it is a spare, and the
// configuration it holds (ConfigMeta: epoch, index in force, member ids;
// none for a replica that was never a member). Its
// memberlist node name is "ID-DataID": two incarnations of one id never
// collide. The meta is encoded in memberlist's node meta (at most
// memberlist.MetaMaxSize, 512 bytes) as
//
//	version (1 byte, 1) | flags (1 byte: 1 spare, 2 leaving, 4 config) |
//	ID (8 bytes, big-endian) | Cell | DataID | ClientAddr | PeerAddr |
//	[config: epoch, index (8 bytes each) | count (1 byte) | ids (8 each)]
//
// each string as a 2-byte big-endian length and its bytes; the
// configuration (1 to 9 distinct non-zero ids) only with flag 4. Cell and
// DataID are 1 to 64 bytes of [A-Za-z0-9._-], ID is not 0, the addresses
// are host:port of at most 256 bytes. Decoding checks all of it, and
// unknown versions, flags and trailing bytes; a failure is a *MetaError.
// A node whose meta does not decode, or names another cell, or does not
// match its node name, is refused: its alive messages are ignored
// (memberlist's AliveDelegate) and a join or merge with a cluster that
// holds one fails (MergeDelegate), so it never appears in Members.
//
// # States
//
// Members lists each member with a State and the time it took it:
//
//   - Alive: joined, or refuted a suspicion, or came back.
//   - Suspect: a probe by this node failed, direct and indirect.
//     memberlist v0.7.0 has no API for suspicion; Discovery learns of the
//     suspicions this node raises from memberlist's log line for them.
//     Suspicions raised by other members reach it only as a later death,
//     so a member may go from Alive straight to Dead. A suspect member is
//     Alive again on its next acknowledged probe, when it changes its
//     meta, or once memberlist would have declared it dead by then.
//   - Dead: the suspicion ran out (memberlist's NotifyLeave without the
//     leaving flag). memberlist never probes a dead member, so every
//     Config.ReconnectInterval (1 s) Discovery joins one dead member's
//     address again, in turn, if it accepts a connection: after a
//     partition, each side having the other dead, they meet again within
//     a few of those rounds instead of at the next rejoin (30 s).
//   - Left: it called Leave, which first gossips its meta with the
//     leaving flag, then leaves: memberlist's Node does not tell a death
//     from a departure.
//
// Dead and left members stay listed for Config.DeadRetention (10
// minutes). Changed returns a channel closed at the next change, so the
// master can react without polling.
//
// # Transport security
//
// With Config.TLS the gossip is protected by mutual TLS: memberlist's
// packets and its streams both ride TLS connections on BindAddr's TCP
// port (no UDP), each handshake verifying the caller's certificate and
// the server's against the cell's CA (rpc/tlsconf's configurations, whose
// certificates are reloaded as they are renewed on disk). A replica
// without a certificate of the cell's CA cannot join, cannot send
// anything that is acted on (nothing it sends reaches memberlist) and
// cannot read the gossip. memberlist's own encryption, a keyring of
// shared symmetric keys, is not used: a shared key says that a sender
// knows the key, not who it is, while a certificate of the cell's CA is
// already what admits a replica to the peer port, and now to the gossip.
//
// After its handshake a connection is a stream, handed to memberlist as
// it is, or a packet connection carrying length-prefixed packets of up to
// 64 KiB. Each member keeps one packet connection to each address it
// sends to; packets are queued and sent without blocking memberlist, and
// dropped when they cannot be sent, as UDP would: memberlist's indirect
// probes and suspicions deal with them as before, and a crash is seen in
// about the same time. tlstransport.go describes the framing and the
// bounds. A TLS member and a plaintext one (Config.TLS nil: memberlist's
// UDP and TCP in the clear) cannot gossip with each other.
//
// # Defaults
//
// memberlist's LAN defaults (probe every 1 s, 500 ms timeout, suspicion
// multiplier 4, gossip every 200 ms) see a crashed member dead after 5 to
// 6 s. The defaults here, tuned for one LAN, are a probe every 200 ms
// with a 100 ms timeout, SuspicionMult 2 (a member suspected for 400 ms
// in a cell of up to ten) and gossip every 200 ms: a crash is seen in
// about a second. Joins are retried after 250 ms, doubling to 5 s, until
// another member is known, then repeated every 30 s so that members that
// lost each other meet again. memberlist's logs go to the Config's
// slog.Logger at their own levels, with component=memberlist.
package discovery
