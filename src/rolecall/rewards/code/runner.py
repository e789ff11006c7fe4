"""Child side of the code sandbox: build the jail, run every test in a fresh process, report.

Stdlib only, never imports rolecall: `sandbox.py` starts it as `python -I -S runner.py CONFIG`
(inside `unshare` when namespaces are available). Three roles, three processes:

- boot (trusted; root, or root of a user namespace): reads the job, builds a private root
  filesystem, forks the server, reaps. As pid 1 of a fresh PID namespace, its exit makes the
  kernel kill every process the tests left behind (double forks and setsid included).
- server (trusted, unprivileged, never runs model code): forks one child per test (functional
  tests share one child until it fails), feeds stdin and captures stdout/stderr through
  memory files at the fd level, enforces the per-test wall time, and writes *raw* outputs to
  the results pipe, then a per-run nonce it only reads after the last test. It never sees
  expected outputs: the verdict is computed by the parent.
- test child (untrusted): setsid, hard=soft rlimits, results pipe closed, then the program.

This file holds the entry point and the boot; the server is `runner_server.py`, the test
child `runner_child.py`, the shared record format `runner_wire.py` and the filesystem jail
`jail.py`. They are sibling standalone scripts, not rolecall modules: all of them are imported
here from this directory at start-up, before the private root hides it (the package data
`rewards/code/*.py` ships them together).
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The filesystem half of boot, the record format, and the server (which pulls in the test child).
from jail import PR_SET_CHILD_SUBREAPER, PR_SET_DUMPABLE, enter_private_root, prctl  # noqa: E402
from runner_server import serve  # noqa: E402
from runner_wire import emit, short  # noqa: E402

del sys.path[0]  # nothing the tests import should resolve to this directory


def boot(cfg: dict) -> None:
    res = cfg["results_fd"]
    os.umask(0o022)                     # the jail's directories must be traversable by the tests
    try:
        prctl(PR_SET_DUMPABLE, 0)       # /proc/<boot>/fd must not hand out the results pipe
        with open(cfg["job"], encoding="utf-8") as f:
            job = json.load(f)
        # Only the fd travels on: the nonce is read by the server after the last test.
        nonce_fd = os.open(cfg["nonce"], os.O_RDONLY | os.O_CLOEXEC)
        if cfg["private_root"]:
            enter_private_root(cfg)
        else:
            prctl(PR_SET_CHILD_SUBREAPER, 1)    # orphans come back to us, to be killed
            signal.signal(signal.SIGTERM, lambda *_: (_kill_descendants(), os._exit(0)))
        pid_ns = os.getpid() == 1
    except BaseException as e:  # noqa: BLE001 - any failure here is the sandbox's, not the code's
        emit(res, {"t": "boot_error", "msg": short(f"{type(e).__name__}: {e}")})
        os._exit(70)
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            serve(cfg, job, nonce_fd, pid_ns)
        except BaseException as e:  # noqa: BLE001
            try:
                emit(res, {"t": "server_error", "msg": short(f"{type(e).__name__}: {e}")})
            except OSError:
                pass
            code = 71
        os._exit(code)
    status = _reap_until(pid)
    if not pid_ns:
        _kill_descendants()
    emit(res, {"t": "exit", "server": _describe_status(status)})
    os._exit(0)


def _reap_until(pid: int) -> int:
    """As pid 1 (or subreaper) reap every orphan until the server itself has exited."""
    while True:
        try:
            wpid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return -1
        if wpid == pid:
            return status


def _describe_status(status: int) -> str:
    if status == -1:
        return "lost"
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit {os.waitstatus_to_exitcode(status)}"


def _kill_descendants() -> None:
    """Without a PID namespace: SIGKILL every process below us (orphans were reparented here)."""
    me = os.getpid()
    for _ in range(20):
        parent = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat", "rb") as f:
                        parent[int(entry)] = int(f.read().rsplit(b")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    pass
        doomed = [p for p in parent if p != me and _descends(p, me, parent)]
        if not doomed:
            return
        for p in doomed:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.01)


def _descends(pid: int, ancestor: int, parent: dict) -> bool:
    for _ in range(64):
        pid = parent.get(pid, 0)
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
    return False


if __name__ == "__main__":
    boot(json.loads(sys.argv[1]))
