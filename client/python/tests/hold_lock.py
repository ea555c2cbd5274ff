"""A process that holds a lock until it is killed (test_kill.py SIGKILLs it).

usage: hold_lock.py PATH LOCK_DELAY_SECONDS

It takes the exclusive lock of PATH (created if missing) and an ephemeral
file PATH-eph, prints "LOCKED <sequencer> <session id>", and waits on its
standard input.
"""

import sys

import chubbycell as cc


def main():
    path, delay = sys.argv[1], float(sys.argv[2])
    cell = cc.Cell()  # CHUBBY_CELL
    s = cell.session(client_name="py-hold-lock")
    h = s.open(path, create=cc.CreateMode.OPEN_OR_CREATE)
    seq = h.acquire(timeout=10, lock_delay=delay)
    s.create_file(path + "-eph", b"", ephemeral=True)
    print("LOCKED", seq, s.id, flush=True)
    sys.stdin.readline()
    s.close()


if __name__ == "__main__":
    main()
