"""Values of the chubbycell API: enums mirroring idl/chubby.thrift, the
records calls return (Stat, Sequencer, Event, ...), the protocol's limits, and
the validation of paths and addresses.

The enums are written out here (so that they are documented and complete in
an editor) and checked against the generated Thrift modules when the library
is imported: an IDL that disagrees fails the import rather than a call.
"""

import dataclasses
import enum
import math
import typing

__all__ = [
    "ErrorCode", "LockMode", "NodeKind", "OpenMode", "CreateMode", "EventKind", "SessionState",
    "LockInfo", "ACLNames", "Stat", "DirEntry", "Sequencer", "Event", "MasterInfo", "ReplicaInfo",
    "CellStatus", "Identity", "Compare", "Op", "MultiResult", "validate_path", "validate_addr", "parse_addrs",
    "MAX_CONTENT_BYTES", "MAX_NAME_BYTES", "MAX_PATH_BYTES", "MAX_PATH_DEPTH",
    "MAX_CLIENT_NAME_BYTES", "MAX_LOCK_DELAY_MS", "DEFAULT_LOCK_DELAY_MS", "MAX_ACQUIRE_WAIT_MS",
    "MAX_TIMESTAMPS_PER_CALL", "MAX_MULTI_COMPARES", "MAX_MULTI_OPS", "MAX_MULTI_BYTES",
    "EVENT_MASK_FILE_CONTENTS_MODIFIED", "EVENT_MASK_CHILD_ADDED",
    "EVENT_MASK_CHILD_REMOVED", "EVENT_MASK_CHILD_MODIFIED", "EVENT_MASK_LOCK_ACQUIRED",
    "EVENT_MASK_CONFLICTING_LOCK_REQUEST", "EVENT_MASK_HANDLE_INVALID", "EVENT_MASK_ALL",
]

# Limits (idl/chubby.thrift; checked against the generated constants at import).
MAX_CONTENT_BYTES = 262144
MAX_NAME_BYTES = 255
MAX_PATH_BYTES = 4096
MAX_PATH_DEPTH = 64
MAX_CLIENT_NAME_BYTES = 256
MAX_LOCK_DELAY_MS = 60000
DEFAULT_LOCK_DELAY_MS = 15000
MAX_ACQUIRE_WAIT_MS = 600000
MAX_TIMESTAMPS_PER_CALL = 1000000
MAX_MULTI_COMPARES = 64
MAX_MULTI_OPS = 64
MAX_MULTI_BYTES = 1048576

# Bits of Session.open's event_mask: the bit of kind k is 1 << (k - 1).
EVENT_MASK_FILE_CONTENTS_MODIFIED = 1
EVENT_MASK_CHILD_ADDED = 2
EVENT_MASK_CHILD_REMOVED = 4
EVENT_MASK_CHILD_MODIFIED = 8
EVENT_MASK_LOCK_ACQUIRED = 16
EVENT_MASK_CONFLICTING_LOCK_REQUEST = 32
EVENT_MASK_HANDLE_INVALID = 64
EVENT_MASK_ALL = 127


class ErrorCode(enum.IntEnum):
    """The cell's error codes (idl/chubby.thrift ErrorCode)."""
    NOT_FOUND = 1
    EXISTS = 2
    NOT_EMPTY = 3
    NOT_DIRECTORY = 4
    IS_DIRECTORY = 5
    INVALID_ARGUMENT = 6
    TOO_LARGE = 7
    PERMISSION_DENIED = 8
    LOCK_HELD = 9
    LOCK_NOT_HELD = 10
    SESSION_EXPIRED = 11
    HANDLE_INVALID = 12
    NOT_MASTER = 13
    STALE_EPOCH = 14
    UNAVAILABLE = 15
    GENERATION_MISMATCH = 16
    TIMED_OUT = 17
    LIMIT_EXCEEDED = 18
    INTERNAL = 19


class LockMode(enum.IntEnum):
    """A lock's mode."""
    EXCLUSIVE = 1
    SHARED = 2


class NodeKind(enum.IntEnum):
    """A node is a file or a directory."""
    FILE = 1
    DIRECTORY = 2


class OpenMode(enum.IntEnum):
    """How a handle may use its node: READ (read, take locks) or READ_WRITE
    (also write contents and delete)."""
    READ = 1
    READ_WRITE = 2


class CreateMode(enum.IntEnum):
    """What Session.open does about a missing or present node."""
    OPEN_EXISTING = 1   #: NOT_FOUND if missing
    OPEN_OR_CREATE = 2  #: create a file if missing
    CREATE_NEW = 3      #: EXISTS if present (always creates with sequential)


class EventKind(enum.IntEnum):
    """Kinds of handle events (idl/chubby.thrift EventKind)."""
    FILE_CONTENTS_MODIFIED = 1
    CHILD_ADDED = 2
    CHILD_REMOVED = 3
    CHILD_MODIFIED = 4
    LOCK_ACQUIRED = 5
    CONFLICTING_LOCK_REQUEST = 6
    HANDLE_INVALID = 7
    MASTER_FAILED_OVER = 8
    EVENTS_LOST = 9


class SessionState(enum.Enum):
    """Where a session is in its life.

    SAFE: the local lease has not run out, so the master counts the session
    alive and its locks are held. JEOPARDY: the local lease ran out with no
    KeepAlive reply; the session may or may not still be alive, and a lock
    holder should stop acting on its locks until it is SAFE again. EXPIRED:
    the grace period ran out, or the cell said the session is over. CLOSED:
    ended by Session.close or Cell.close.
    """
    SAFE = "safe"
    JEOPARDY = "jeopardy"
    EXPIRED = "expired"
    CLOSED = "closed"


@dataclasses.dataclass(frozen=True)
class LockInfo:
    """A node's lock at the time of the reply: mode is None when it is free;
    delay_remaining_ms > 0 means it is in lock-delay for that long."""
    mode: "LockMode | None"
    holders: int
    waiters: int
    delay_remaining_ms: int


@dataclasses.dataclass(frozen=True)
class ACLNames:
    """A node's three ACL names: each names a file in /acl listing the
    principals that have the right ("" grants it to everybody; a name whose
    file is missing, to nobody). read_acl: Open, reads, listings, events,
    CheckSequencer; write_acl: writes, locks, and on a directory creating
    and deleting entries; change_acl: SetACL. Pass one to Handle.set_acl;
    Stat.acl carries the node's."""
    read_acl: str = ""
    write_acl: str = ""
    change_acl: str = ""

    def __post_init__(self):
        for name in ("read_acl", "write_acl", "change_acl"):
            v = getattr(self, name)
            if not isinstance(v, str):
                from .errors import InvalidArgumentError
                raise InvalidArgumentError("ACLNames.%s must be a str, not %s" % (name, type(v).__name__))
            if v:
                _check_name("ACLNames.%s" % name, v)


@dataclasses.dataclass(frozen=True)
class Stat:
    """A node's metadata (idl/chubby.thrift Stat). Times are Unix
    milliseconds from the master's clock; for a directory, size is its
    number of children; acl is None from a cell that predates ACLs."""
    path: str
    kind: NodeKind
    instance: int
    content_generation: int
    lock_generation: int
    acl_generation: int
    checksum: int
    size: int
    create_time_ms: int
    modify_time_ms: int
    ephemeral: bool
    ephemeral_owner: int
    lock: LockInfo
    acl: "ACLNames | None"

    @property
    def is_dir(self):
        """True for a directory."""
        return self.kind == NodeKind.DIRECTORY


@dataclasses.dataclass(frozen=True)
class DirEntry:
    """One child of a directory: its name and Stat."""
    name: str
    stat: Stat


_SEQ_PREFIX = "chubby-seq:v1:"


@dataclasses.dataclass(frozen=True)
class Sequencer:
    """A held lock's name: node path and instance, mode, lock generation (a
    fencing token). ``str(seq)`` is the printable form the CLI and the Go
    client use, ``chubby-seq:v1:<E|S>:<lock_generation>:<instance>:<path>``;
    :meth:`parse` reads it back."""
    path: str
    mode: LockMode
    lock_generation: int
    instance: int

    def __str__(self):
        m = {LockMode.EXCLUSIVE: "E", LockMode.SHARED: "S"}.get(self.mode, "?%d" % int(self.mode))
        return "%s%s:%d:%d:%s" % (_SEQ_PREFIX, m, self.lock_generation, self.instance, self.path)

    @classmethod
    def parse(cls, s):
        """Parse the printable form strictly (as the Go client's
        ParseSequencer: mode E or S, canonical non-negative decimals, a valid
        path), so that exactly one string names each sequencer. Raises
        InvalidArgumentError."""
        from .errors import InvalidArgumentError
        if not isinstance(s, str):
            raise InvalidArgumentError("a sequencer is a str, not %s" % type(s).__name__, op="parse-sequencer")
        short = _truncate(s)
        if not s.startswith(_SEQ_PREFIX):
            raise InvalidArgumentError("sequencer %r does not start with %r" % (short, _SEQ_PREFIX),
                                       op="parse-sequencer")
        parts = s[len(_SEQ_PREFIX):].split(":", 3)
        if len(parts) != 4:
            raise InvalidArgumentError(
                "sequencer %r: want chubby-seq:v1:<E|S>:<lock_generation>:<instance>:<path>" % short,
                op="parse-sequencer")
        mode = {"E": LockMode.EXCLUSIVE, "S": LockMode.SHARED}.get(parts[0])
        if mode is None:
            raise InvalidArgumentError("sequencer %r: mode %r is not E or S" % (short, _truncate(parts[0])),
                                       op="parse-sequencer")
        nums = []
        for what, p in (("lock generation", parts[1]), ("instance", parts[2])):
            if not p or not p.isascii() or not p.isdigit() or (len(p) > 1 and p[0] == "0") or int(p) >= 1 << 63:
                raise InvalidArgumentError("sequencer %r: %s %r is not a canonical non-negative int64"
                                           % (short, what, _truncate(p)), op="parse-sequencer")
            nums.append(int(p))
        try:
            validate_path(parts[3])
        except InvalidArgumentError as e:
            raise InvalidArgumentError("sequencer %r: %s" % (short, e.message), op="parse-sequencer") from None
        return cls(path=parts[3], mode=mode, lock_generation=nums[0], instance=nums[1])


@dataclasses.dataclass(frozen=True)
class Event:
    """One event of a handle (see Session.open's event_mask): the cell queued
    it when it applied the change. seq numbers the session's events (each
    delivered once, in order, also across a failover); time_ms is the
    master's clock (Unix ms). Fields a kind does not use are None.

    child: CHILD_* kinds. content_generation: FILE_CONTENTS_MODIFIED and
    CHILD_MODIFIED, after the write. lock_generation and lock_mode:
    LOCK_ACQUIRED (the new holding period, the mode granted);
    CONFLICTING_LOCK_REQUEST (the generation held, the mode asked).
    lost_from: EVENTS_LOST, the first seq dropped (the last is seq)."""
    seq: int
    kind: EventKind
    time_ms: int
    path: "str | None" = None
    child: "str | None" = None
    content_generation: "int | None" = None
    lock_generation: "int | None" = None
    lock_mode: "LockMode | None" = None
    lost_from: "int | None" = None


class Identity(typing.NamedTuple):
    """Whom the cell takes this client for (Cell.who_am_i): its principal
    (its certificate's common name; "anonymous" without one) and whether the
    call came over TLS. A tuple (principal, tls)."""
    principal: str
    tls: bool


class Compare:
    """One condition of a Multi (Session.multi), checked against the cell's
    state when the Multi is applied. Make them with the class methods."""

    __slots__ = ("path", "kind", "value")

    EXISTS, NOT_EXISTS, CONTENT_GENERATION, INSTANCE = 1, 2, 3, 4

    def __init__(self, path, kind, value=None):
        self.path, self.kind, self.value = validate_path(path), kind, value

    @classmethod
    def exists(cls, path):
        """Holds if path exists."""
        return cls(path, cls.EXISTS)

    @classmethod
    def not_exists(cls, path):
        """Holds if path does not exist."""
        return cls(path, cls.NOT_EXISTS)

    @classmethod
    def generation(cls, path, gen):
        """Holds if path exists with content generation gen."""
        return cls(path, cls.CONTENT_GENERATION, _check_int("generation", gen))

    @classmethod
    def instance(cls, path, inst):
        """Holds if path exists as instance inst (not deleted and created anew since)."""
        return cls(path, cls.INSTANCE, _check_int("instance", inst))

    def __repr__(self):
        return "Compare(%r, %d, %r)" % (self.path, self.kind, self.value)


class Op:
    """One change of a Multi (Session.multi); each has the rights, events
    and semantics of the single call it stands for. Make them with the
    class methods."""

    __slots__ = ("kind", "path", "content", "directory", "ephemeral", "recursive", "expected_generation")

    CREATE, SET_CONTENTS, DELETE = 1, 2, 3

    def __init__(self, kind, path, content=None, directory=False, ephemeral=False, recursive=False,
                 expected_generation=None):
        self.kind, self.path = kind, validate_path(path)
        self.content = None if content is None else check_content("content", content)
        self.directory, self.ephemeral, self.recursive = directory, ephemeral, recursive
        self.expected_generation = expected_generation

    @classmethod
    def create(cls, path, content=b"", *, ephemeral=False):
        """Create the file path with content (ExistsError if present; its
        parent must exist). ephemeral: owned by the Multi's session, deleted
        when it ends."""
        return cls(cls.CREATE, path, content, ephemeral=check_flag("ephemeral", ephemeral))

    @classmethod
    def mkdir(cls, path):
        """Create the directory path (its parent must exist)."""
        return cls(cls.CREATE, path, directory=True)

    @classmethod
    def set(cls, path, content, *, if_generation=None):
        """Replace the file's content; with if_generation only if its content
        generation is that (else the whole Multi fails with
        GenerationMismatchError)."""
        if if_generation is not None:
            _check_int("if_generation", if_generation)
        return cls(cls.SET_CONTENTS, path, content, expected_generation=if_generation)

    @classmethod
    def delete(cls, path, *, recursive=False):
        """Delete the node (a non-empty directory only when recursive)."""
        return cls(cls.DELETE, path, recursive=check_flag("recursive", recursive))

    def __repr__(self):
        return "Op(%d, %r)" % (self.kind, self.path)


@dataclasses.dataclass(frozen=True)
class MultiResult:
    """A Multi's answer. succeeded: every compare held and every op was
    applied; else failed_compare is the index of the first compare that did
    not hold (and nothing changed). stats: when succeeded, each op's node
    after it (a delete's: before it), in the order of the ops."""
    succeeded: bool
    failed_compare: int
    stats: tuple

    def __bool__(self):
        return self.succeeded


@dataclasses.dataclass(frozen=True)
class MasterInfo:
    """Cell.get_master's answer: the master's address, epoch and id, and the
    client addresses of the configuration's members."""
    address: str
    epoch: int
    master_id: str
    replicas: tuple


@dataclasses.dataclass(frozen=True)
class ReplicaInfo:
    """One replica in Cell.status: id, client address, role name
    ("MASTER", "REPLICA", "RECOVERING", "UNREACHABLE") and committed op."""
    id: str
    address: str
    role: str
    committed_op: int


@dataclasses.dataclass(frozen=True)
class CellStatus:
    """Cell.status's answer (the main fields of idl/chubby.thrift CellStatus)."""
    cell: str
    master_id: str
    master_address: str
    epoch: int
    replicas: tuple
    sessions: int
    nodes: int
    handles: int
    locks_held: int
    version: str


def _truncate(s, n=80):
    return s if len(s) <= n else s[:n] + "..."


_NAME_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def _check_name(what, name):
    """Check that name is one path component (as validate_path's)."""
    from .errors import InvalidArgumentError
    try:
        validate_path("/" + name)
    except InvalidArgumentError as e:
        raise InvalidArgumentError("%s %r is not a valid name: %s" % (what, _truncate(name), e.message)) from None
    if "/" in name:
        raise InvalidArgumentError("%s %r is not one name: it has a slash" % (what, _truncate(name)))


def _check_int(name, v):
    from .errors import InvalidArgumentError
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise InvalidArgumentError("%s must be a non-negative int, not %r" % (name, v))
    return v


def validate_path(p):
    """Check that p is a well-formed node path, by the cell's rules: "/" or
    an absolute slash path of 1..MAX_PATH_DEPTH components, each 1..255 bytes
    of [A-Za-z0-9._-] and not "." or "..", at most MAX_PATH_BYTES in all, with
    no empty component and no trailing slash. Returns p; raises
    InvalidArgumentError."""
    from .errors import InvalidArgumentError
    if not isinstance(p, str):
        raise InvalidArgumentError("a path is a str, not %s" % type(p).__name__)
    if p == "":
        raise InvalidArgumentError("empty path")
    b = p.encode("utf-8", "surrogatepass")
    if len(b) > MAX_PATH_BYTES:
        raise InvalidArgumentError("path is %d bytes, at most %d allowed" % (len(b), MAX_PATH_BYTES))
    if p[0] != "/":
        raise InvalidArgumentError("path %r is not absolute" % _truncate(p))
    if p == "/":
        return p
    comps = p[1:].split("/")
    if len(comps) > MAX_PATH_DEPTH:
        raise InvalidArgumentError("path %r has %d components, at most %d allowed"
                                   % (_truncate(p), len(comps), MAX_PATH_DEPTH))
    for c in comps:
        if c == "":
            raise InvalidArgumentError("path %r has an empty component" % _truncate(p))
        if c in (".", ".."):
            raise InvalidArgumentError("path %r has a %r component" % (_truncate(p), c))
        cb = c.encode("utf-8", "surrogatepass")
        if len(cb) > MAX_NAME_BYTES:
            raise InvalidArgumentError("path %r has a component of %d bytes, at most %d allowed"
                                       % (_truncate(p), len(cb), MAX_NAME_BYTES))
        for ch in cb:
            if ch not in _NAME_BYTES:
                raise InvalidArgumentError("path %r: byte %r not allowed in a name (only A-Z a-z 0-9 . _ -)"
                                           % (_truncate(p), bytes([ch])))
    return p


def split_addr(addr):
    """Split a validated host:port into (host, port); IPv6 hosts lose their brackets."""
    host, _, port = addr.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def validate_addr(addr):
    """Check that addr is a usable replica address: host:port with a
    non-empty host (a name or an IP; IPv6 in brackets) and a decimal port in
    1..65535. It does not resolve the name. Returns addr; raises
    InvalidArgumentError."""
    from .errors import InvalidArgumentError
    if not isinstance(addr, str):
        raise InvalidArgumentError("an address is a str, not %s" % type(addr).__name__)
    if addr == "":
        raise InvalidArgumentError("empty address")
    if len(addr) > 512:
        raise InvalidArgumentError("address %r is longer than 512 bytes" % _truncate(addr))
    host, sep, port = addr.rpartition(":")
    if not sep:
        raise InvalidArgumentError("address %r: want host:port" % _truncate(addr))
    if host.startswith("["):
        if not host.endswith("]") or len(host) < 3:
            raise InvalidArgumentError("address %r: malformed IPv6 host" % _truncate(addr))
        inner = host[1:-1]
        if "[" in inner or "]" in inner:
            raise InvalidArgumentError("address %r: malformed IPv6 host" % _truncate(addr))
    elif ":" in host or "[" in host or "]" in host:
        raise InvalidArgumentError("address %r: want host:port (IPv6 hosts in brackets)" % _truncate(addr))
    if host == "":
        raise InvalidArgumentError("address %r: missing host" % _truncate(addr))
    if any(c in host for c in " \t/") or not host.isprintable():
        raise InvalidArgumentError("address %r: malformed host" % _truncate(addr))
    if not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise InvalidArgumentError("address %r: port must be a number in 1..65535" % _truncate(addr))
    return addr


def parse_addrs(addrs):
    """Validate a list of replica addresses, or a comma-separated string of
    them (as in CHUBBY_CELL; blanks around entries ignored). Empty entries,
    malformed addresses and duplicates raise InvalidArgumentError. Returns a
    new list."""
    from .errors import InvalidArgumentError
    if isinstance(addrs, str):
        addrs = [a.strip() for a in addrs.split(",")]
    try:
        addrs = list(addrs)
    except TypeError:
        raise InvalidArgumentError("addresses are a list of host:port or a comma-separated str") from None
    if not addrs:
        raise InvalidArgumentError("no address given")
    out = []
    for a in addrs:
        validate_addr(a)
        if a in out:
            raise InvalidArgumentError("address %r given twice" % a)
        out.append(a)
    return out


def check_seconds(name, v, *, lo=0.0, hi=None, lo_open=True, allow_none=False):
    """Validate a duration in seconds (an int or float, finite, in range)."""
    from .errors import InvalidArgumentError
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise InvalidArgumentError("%s must be a finite number of seconds, not %r" % (name, v))
    if (lo_open and v <= lo) or (not lo_open and v < lo):
        raise InvalidArgumentError("%s must be %s %g s, got %r" % (name, ">" if lo_open else ">=", lo, v))
    if hi is not None and v > hi:
        raise InvalidArgumentError("%s must be at most %g s, got %r" % (name, hi, v))
    return v


def check_flag(name, v):
    """Validate a bool argument."""
    from .errors import InvalidArgumentError
    if not isinstance(v, bool):
        raise InvalidArgumentError("%s must be True or False, not %r" % (name, v))
    return v


def check_enum(name, enum_cls, v):
    """Validate an enum argument (a member or its int value) and return the member."""
    from .errors import InvalidArgumentError
    if isinstance(v, bool):
        raise InvalidArgumentError("%s must be a %s, not %r" % (name, enum_cls.__name__, v))
    try:
        return enum_cls(v)
    except (ValueError, TypeError):
        raise InvalidArgumentError("%s must be a %s, not %r" % (name, enum_cls.__name__, v)) from None


def check_content(name, v):
    """Validate file content: bytes-like, at most MAX_CONTENT_BYTES. Returns bytes."""
    from .errors import InvalidArgumentError, TooLargeError
    if isinstance(v, str) or not isinstance(v, (bytes, bytearray, memoryview)):
        raise InvalidArgumentError("%s must be bytes, not %s" % (name, type(v).__name__))
    b = bytes(v)
    if len(b) > MAX_CONTENT_BYTES:
        raise TooLargeError("%s is %d bytes, at most %d allowed" % (name, len(b), MAX_CONTENT_BYTES))
    return b


def ms_ceil(seconds):
    """Seconds (float) to whole milliseconds, rounded up."""
    return int(math.ceil(seconds * 1000 - 1e-9))
