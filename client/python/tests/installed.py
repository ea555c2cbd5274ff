"""Run by TestPythonPipInstall with the python of a venv into which pip
installed chubbycell (from a copy of client/python without its generated
modules): the library must come from the venv, with the Thrift modules its
build generated, and work against the cell in CHUBBY_CELL. Prints
"INSTALLED OK" and exits 0, or fails with a traceback."""

import asyncio
import os
import sys

import chubbycell as cc
from chubbycell import aio

here = os.path.dirname(os.path.abspath(cc.__file__))
assert here.startswith(sys.prefix + os.sep), "chubbycell imported from %s, not the venv %s" % (here, sys.prefix)
assert os.path.isfile(os.path.join(here, "_thrift", "chubby", "ttypes.py")), "no generated modules in " + here
assert not [f for f in os.listdir(os.path.join(here, "_thrift", "chubby")) if f.endswith("-remote")]

path = sys.argv[1]
with cc.Cell() as cell, cell.session() as s:
    s.mkdir(path, parents=True)
    with s.lock(path + "/lock") as held:
        ok, _ = cell.check_sequencer(held.sequencer)
        assert ok
    r = s.multi([cc.Compare.not_exists(path + "/f")], [cc.Op.create(path + "/f", b"installed")])
    assert r.succeeded
    assert len(cell.get_timestamps(5)) == 5


async def main():
    async with aio.AsyncCell() as cell:
        async with await cell.session() as s:
            h = await s.open(path + "/f")
            assert await h.read() == b"installed"

asyncio.run(main())
print("INSTALLED OK", here)
