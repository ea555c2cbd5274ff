// replica.thrift — replica-to-replica traffic of the view-change protocol
// (Viewstamped Replication Revisited with the log on disk). Served on each
// replica's peer port, apart from client traffic. The fields mirror
// replica/vr.Message one for one; unsigned numbers travel as i64 and are
// refused when negative.

namespace go replica

struct Entry {
    1: required i64 index
    2: required i64 view
    3: required byte type   // 1 command, 2 configuration
    4: required binary data
}

struct Run {
    1: required i64 view
    2: required i64 last
}

// addr packs the client and peer addresses ("client|peer").
struct Member {
    1: required i64 id
    2: required string addr
}

// config, when set, is the whole configuration the snapshot was taken
// under (vr.EncodeConfig: voters and learners, epoch, the entry that
// opened it) and supersedes members, which then lists the same replicas.
struct SnapshotMeta {
    1: required i64 index
    2: required i64 view
    3: required list<Member> members
    4: optional binary config
}

// SnapshotChunk places one chunk of a snapshot transfer (message types 12
// and 13): n is the chunk's number (in an acknowledgement, the next chunk
// wanted); chunks, length and sum (CRC-32C) describe the whole snapshot.
struct SnapshotChunk {
    1: required i64 n
    2: required i64 chunks
    3: required i64 length
    4: required i64 sum
}

struct Message {
    1: required byte type
    2: required i64 from
    3: required i64 to
    4: required i64 view
    5: required i64 op
    6: required i64 op_view
    7: required i64 commit
    8: required i64 prev_op
    9: required i64 prev_view
    10: required i64 last_normal_view
    11: required i64 start_op
    12: required i64 stamp
    13: required bool normal
    14: required bool reject
    15: required bool granted
    16: required bool final
    17: required list<Entry> entries
    18: required list<Run> runs
    19: optional SnapshotMeta snapshot
    20: optional binary snapshot_data
    21: optional SnapshotChunk chunk
}

exception ReplicaError {
    1: required string message
}

service Replica {
    // Deliver hands a batch of messages from one replica to another. The
    // receiver processes them (steps them and carries out what follows,
    // its fsync included) and answers with the messages it has for the
    // sender by then, typically the PrepareOKs of the Prepares delivered:
    // one round trip per Prepare and acknowledgement instead of two. It
    // waits for that at most a few milliseconds; later replies travel as
    // Deliver calls the other way. cell names the cell, so that a replica
    // of another cell is refused. from_addr is the sender's peer address,
    // so that a replica that does not know the sender yet (one being
    // added to the cell) can answer it.
    list<Message> Deliver(1: string cell, 2: i64 from, 3: list<Message> msgs, 4: string from_addr) throws (1: ReplicaError err)
}
