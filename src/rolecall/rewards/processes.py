"""Nothing a reward starts outlives it: its worker keeps every descendant, and is killed with them.

A user's reward may start helpers that leave its process group on purpose (a checker's server
started with `setsid`, a daemon that forks twice): killing the worker's group does not reach
them. So the worker makes itself a *child subreaper* (Linux `prctl(PR_SET_CHILD_SUBREAPER)`):
a descendant orphaned anywhere below it is re-parented to it rather than to init, so the whole
tree stays below the worker. `kill_tree` then stops every process of that tree (found through
`/proc`, again until no new one appears, so a fork racing the kill is caught), kills them, and
the caller kills the worker. Elsewhere than Linux both are no-ops, and the group kill is all.
"""
from __future__ import annotations

import ctypes
import os
import signal

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants; False where that is not possible."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux, or no prctl
        return False


def _children() -> dict[int, list[int]]:
    """parent pid -> its children, from /proc (empty where there is no /proc)."""
    out: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
        except OSError:  # it ended while we looked
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) ": state, ppid, ...
        if len(fields) > 1 and fields[1].isdigit():
            out.setdefault(int(fields[1]), []).append(int(name))
    return out


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, parents before children."""
    tree, out, todo = _children(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_tree(pid: int) -> int:
    """Stop, then kill, every descendant of `pid` (not `pid` itself); how many were killed."""
    stopped: set[int] = set()
    for _ in range(10):  # until a scan finds none it has not stopped (a fork racing the scan)
        found = [p for p in descendants(pid) if p not in stopped]
        if not found:
            break
        for p in found:
            try:
                os.kill(p, signal.SIGSTOP)
            except OSError:
                pass
            stopped.add(p)
    for p in stopped:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    return len(stopped)
