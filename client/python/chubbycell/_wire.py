"""The generated Thrift modules, and conversions between their structs and
the library's records.

``./build.sh python`` generates them from idl/chubby.thrift with Apache
Thrift's compiler (``thrift --gen py``) into ``chubbycell/_thrift`` (not
committed): the IDL's Python namespace ``chubby`` then lives at
``chubbycell._thrift.chubby``, inside this package, so it can clash with no
other module called ``chubby`` and needs no sys.path entry of its own.
"""

try:
    from ._thrift.chubby import Cell as CellService, FileSystem, Lock, Oracle, Session as SessionService
    from ._thrift.chubby import constants, ttypes
except ImportError as e:  # pragma: no cover - depends on the build
    raise ImportError(
        "chubbycell: the Thrift modules generated from idl/chubby.thrift are missing "
        "(chubbycell/_thrift); run ./build.sh python (it needs Debian's thrift-compiler "
        "and python3-thrift): %s" % e) from e

from . import types as t

__all__ = ["CellService", "FileSystem", "Lock", "Oracle", "SessionService", "ttypes", "constants"]


def _check():
    """Fail the import if the generated modules disagree with types.py."""
    pairs = [(t.ErrorCode, ttypes.ErrorCode), (t.LockMode, ttypes.LockMode), (t.NodeKind, ttypes.NodeKind),
             (t.OpenMode, ttypes.OpenMode), (t.CreateMode, ttypes.CreateMode), (t.EventKind, ttypes.EventKind)]
    for ours, gen in pairs:
        if {m.name: m.value for m in ours} != dict(gen._NAMES_TO_VALUES):
            raise ImportError("chubbycell: enum %s differs from idl/chubby.thrift; "
                              "update chubbycell/types.py" % ours.__name__)
    if ({"EXISTS": t.Compare.EXISTS, "NOT_EXISTS": t.Compare.NOT_EXISTS,
         "CONTENT_GENERATION": t.Compare.CONTENT_GENERATION, "INSTANCE": t.Compare.INSTANCE}
            != dict(ttypes.CompareKind._NAMES_TO_VALUES)
            or {"CREATE": t.Op.CREATE, "SET_CONTENTS": t.Op.SET_CONTENTS, "DELETE": t.Op.DELETE}
            != dict(ttypes.MultiOpKind._NAMES_TO_VALUES)):
        raise ImportError("chubbycell: CompareKind or MultiOpKind differs from idl/chubby.thrift; "
                          "update chubbycell/types.py")
    for name in ("MAX_CONTENT_BYTES", "MAX_NAME_BYTES", "MAX_PATH_BYTES", "MAX_PATH_DEPTH",
                 "MAX_CLIENT_NAME_BYTES", "MAX_LOCK_DELAY_MS", "DEFAULT_LOCK_DELAY_MS",
                 "MAX_ACQUIRE_WAIT_MS", "MAX_TIMESTAMPS_PER_CALL", "MAX_MULTI_COMPARES", "MAX_MULTI_OPS",
                 "MAX_MULTI_BYTES", "EVENT_MASK_ALL",
                 "EVENT_MASK_FILE_CONTENTS_MODIFIED", "EVENT_MASK_CHILD_ADDED", "EVENT_MASK_CHILD_REMOVED",
                 "EVENT_MASK_CHILD_MODIFIED", "EVENT_MASK_LOCK_ACQUIRED",
                 "EVENT_MASK_CONFLICTING_LOCK_REQUEST", "EVENT_MASK_HANDLE_INVALID"):
        if getattr(t, name) != getattr(constants, name):
            raise ImportError("chubbycell: constant %s differs from idl/chubby.thrift; "
                              "update chubbycell/types.py" % name)


_check()


def _req(v, what):
    from .errors import ProtocolError
    if v is None:
        raise ProtocolError("the reply lacks its required field %s" % what)
    return v


def _enum(cls, v, what, optional=False):
    from .errors import ProtocolError
    if v is None and optional:
        return None
    try:
        return cls(_req(v, what))
    except ValueError:
        raise ProtocolError("the reply's %s has the unknown value %r" % (what, v)) from None


def stat(s):
    """A wire Stat as a types.Stat (ProtocolError if required fields are missing)."""
    _req(s, "stat")
    li = _req(s.lock, "stat.lock")
    acl = None
    if s.acl is not None:
        acl = t.ACLNames(read_acl=s.acl.read_acl or "", write_acl=s.acl.write_acl or "",
                         change_acl=s.acl.change_acl or "")
    return t.Stat(
        path=_req(s.path, "stat.path"), kind=_enum(t.NodeKind, s.kind, "stat.kind"),
        instance=_req(s.instance, "stat.instance"),
        content_generation=_req(s.content_generation, "stat.content_generation"),
        lock_generation=_req(s.lock_generation, "stat.lock_generation"),
        acl_generation=_req(s.acl_generation, "stat.acl_generation"),
        checksum=_req(s.checksum, "stat.checksum"), size=_req(s.size, "stat.size"),
        create_time_ms=_req(s.create_time_ms, "stat.create_time_ms"),
        modify_time_ms=_req(s.modify_time_ms, "stat.modify_time_ms"),
        ephemeral=bool(s.ephemeral), ephemeral_owner=s.ephemeral_owner or 0,
        lock=t.LockInfo(mode=_enum(t.LockMode, li.mode, "lock.mode", optional=True),
                        holders=li.holders or 0, waiters=li.waiters or 0,
                        delay_remaining_ms=li.delay_remaining_ms or 0),
        acl=acl)


def sequencer(s):
    """A wire Sequencer as a types.Sequencer."""
    _req(s, "sequencer")
    return t.Sequencer(path=_req(s.path, "sequencer.path"), mode=_enum(t.LockMode, s.mode, "sequencer.mode"),
                       lock_generation=_req(s.lock_generation, "sequencer.lock_generation"),
                       instance=_req(s.instance, "sequencer.instance"))


def acl_to_wire(a):
    """A types.ACLNames as a wire ACLNames."""
    return ttypes.ACLNames(read_acl=a.read_acl, write_acl=a.write_acl, change_acl=a.change_acl)


def compare_to_wire(c):
    """A types.Compare as a wire Compare."""
    return ttypes.Compare(path=c.path, kind=c.kind, value=c.value)


def op_to_wire(o):
    """A types.Op as a wire MultiOp."""
    return ttypes.MultiOp(kind=o.kind, path=o.path, content=o.content,
                          directory=True if o.directory else None, ephemeral=True if o.ephemeral else None,
                          recursive=True if o.recursive else None, expected_generation=o.expected_generation)


def sequencer_to_wire(s):
    """A types.Sequencer as a wire Sequencer."""
    return ttypes.Sequencer(path=s.path, mode=int(s.mode), lock_generation=s.lock_generation,
                            instance=s.instance)


def event(e):
    """A wire Event as a types.Event, or None if its kind is unknown to this library."""
    try:
        kind = t.EventKind(e.kind)
    except (ValueError, TypeError):
        return None
    mode = None
    if e.lock_mode is not None:
        try:
            mode = t.LockMode(e.lock_mode)
        except ValueError:
            mode = None
    return t.Event(seq=e.seq or 0, kind=kind, time_ms=e.time_ms or 0, path=e.path, child=e.child,
                   content_generation=e.content_generation, lock_generation=e.lock_generation,
                   lock_mode=mode, lost_from=e.lost_from)
