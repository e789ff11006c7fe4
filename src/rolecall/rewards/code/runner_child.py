"""Test child of the code sandbox's runner: the untrusted process that runs the model's program.

Stdlib only, never imports rolecall: a sibling script of `runner.py`, imported from this
directory at start-up (before the private root hides it). The server forks one of these per
test (or per functional segment): it takes its own session, hard = soft rlimits and clean
stdio, writes a setup line on the status fd, then runs the program and reports how it ended.
Separate from the server because everything here runs in the process that model code owns.
"""
from __future__ import annotations

import builtins
import copy
import errno
import io
import json
import os
import resource
import signal
import sys
import types

from jail import PR_SET_PDEATHSIG, prctl
from runner_wire import SETUP_DONE, SOURCE_NAME, STATUS_FD, short


def child_setup(cfg: dict, stdin: int, out: int, err: int, status: int) -> None:
    """In the fresh fork, before any model code: own session, fds 0-3 only, limits, clean stdio."""
    try:
        os.setsid()
        os.dup2(stdin, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.dup2(status, STATUS_FD)
        os.closerange(STATUS_FD + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)    # die with the server if it is killed
        lim = cfg["limits"]
        nproc = lim["nproc"] + (_tasks_of_my_uid() if lim["nproc_relative"] else 0)
        for res, value in ((resource.RLIMIT_CPU, lim["cpu"]), (resource.RLIMIT_AS, lim["as"]),
                           (resource.RLIMIT_FSIZE, lim["fsize"]), (resource.RLIMIT_NPROC, nproc),
                           (resource.RLIMIT_NOFILE, lim["nofile"]), (resource.RLIMIT_CORE, 0)):
            resource.setrlimit(res, (value, value))   # hard = soft: the code cannot raise them
        # Past the file size limit a write fails with EFBIG instead of killing the process.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
        sys.stdout = sys.__stdout__ = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8")
        sys.stderr = sys.__stderr__ = io.TextIOWrapper(
            io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace", line_buffering=True)
        sys.argv = [SOURCE_NAME]
        # Written before any model code runs, so the program can neither fake its absence
        # nor remove it: without it, a failure is the harness's (unscorable), not the code's.
        _report(SETUP_DONE.decode() + "\n")
    except BaseException:  # noqa: BLE001 - without a working setup nothing may run
        os._exit(111)


def _tasks_of_my_uid() -> int:
    """RLIMIT_NPROC counts every task of the real uid; without a uid of our own (no root, no
    user namespace) the budget is what already runs plus `nproc`."""
    uid, count = str(os.getuid()), 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except (OSError, ValueError):
            continue
        if fields.get("Uid", "").split()[:1] == [uid]:
            count += int(fields.get("Threads", "1"))
    return count


def run_program(code: str) -> None:
    """Run a stdin/stdout program as `__main__` in fresh globals, then report how it ended."""
    streams = (sys.stdout, sys.stderr)
    main = types.ModuleType("__main__")
    main.__dict__.update(__builtins__=builtins, __file__=SOURCE_NAME)
    sys.modules["__main__"] = main
    try:
        exec(compile(code, SOURCE_NAME, "exec", dont_inherit=True), main.__dict__)
        end, detail = "ok", ""
    except SystemExit as e:  # exiting after printing is a normal end of a program
        end, detail = ("ok", "") if e.code in (None, 0) else ("exit", f"exit status {e.code!r}")
    except BaseException as e:  # noqa: BLE001
        end, detail = _classify(e)
    end, detail = _finish(end, detail, streams)
    _report(f"{end}\t{short(detail)}\n")
    os._exit(0)


def _finish(end: str, detail: str, streams) -> tuple[str, str]:
    """What interpreter shutdown would do: join threads, atexit, flush stdout/stderr."""
    try:
        threading = sys.modules.get("threading")
        if threading is not None:
            threading._shutdown()
        import atexit
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        pass
    for stream in {id(s): s for s in (sys.stdout, sys.stderr, *streams)}.values():
        try:
            if not getattr(stream, "closed", False):
                stream.flush()
        except BaseException as e:  # noqa: BLE001
            failed = _classify(e)
            if end == "ok" or failed[0] == "output":
                end, detail = failed
    return end, detail


def _classify(e: BaseException) -> tuple[str, str]:
    if isinstance(e, MemoryError):
        return "memory", "MemoryError"
    if isinstance(e, OSError) and e.errno in (errno.EFBIG, errno.ENOSPC, errno.EDQUOT):
        return "output", f"file size or disk limit ({errno.errorcode[e.errno]})"
    if isinstance(e, SyntaxError):
        return "error", f"{type(e).__name__}: {e.msg} (line {e.lineno})"
    line, tb = None, e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == SOURCE_NAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    where = f" (line {line})" if line else ""
    return "error", f"{type(e).__name__}: {e}{where}"


def _report(line: str) -> None:
    data = line.encode("utf-8", "replace")
    try:
        while data:
            data = data[os.write(STATUS_FD, data):]
    except OSError:
        pass


def run_functional(job: dict, start: int, cap: int) -> None:
    """Exec the module once (not as __main__), then call fn_name for tests start..n-1."""
    module = types.ModuleType("solution")
    module.__dict__.update(__builtins__=builtins, __file__=SOURCE_NAME)
    sys.modules["solution"] = module
    try:
        exec(compile(job["code"], SOURCE_NAME, "exec", dont_inherit=True), module.__dict__)
    except BaseException as e:  # noqa: BLE001 - SystemExit at import time fails too
        end, detail = ("error", "SystemExit while loading the module") if isinstance(e, SystemExit) else _classify(e)
        _report(f"*\t{end}\t{short(detail)}\n")
        os._exit(0)
    for j in range(start, len(job["inputs"])):
        _report(_call(module.__dict__, job["fn_name"], job["inputs"][j], j, cap))
    os._exit(0)


def _call(g: dict, name: str, args: list, j: int, cap: int) -> str:
    try:
        fn = g.get(name)
        if not callable(fn):
            cls = g.get("Solution")
            if not (isinstance(cls, type) and hasattr(cls, name)):
                raise NameError(f"no function {name!r} at module level or in class Solution")
            fn = getattr(cls(), name)
        payload = json.dumps(_plain(fn(*copy.deepcopy(args))), ensure_ascii=True)
        if len(payload) > cap:
            return f"{j}\toutput\treturn value over {cap} bytes\n"
        return f"{j}\tok\t{payload}\n"
    except SystemExit as e:
        return f"{j}\terror\t{short(f'SystemExit({e.code!r}) during the call')}\n"
    except BaseException as e:  # noqa: BLE001
        end, detail = _classify(e)
        return f"{j}\t{end}\t{short(detail)}\n"


def _plain(v, depth: int = 0):
    """The return value as plain JSON data with exact types (tuples become lists)."""
    if depth > 100:
        raise ValueError("return value nested too deeply")
    t = type(v)
    if v is None or t in (bool, int, float, str):
        return v
    if isinstance(v, (list, tuple)):
        return [_plain(x, depth + 1) for x in v]
    if isinstance(v, dict):
        if not all(type(k) is str for k in v):
            raise TypeError("return value has a dict with non-string keys")
        return {k: _plain(x, depth + 1) for k, x in v.items()}
    if isinstance(v, int):             # subclasses (bool cannot be subclassed): the plain value
        return int.__int__(v)
    if isinstance(v, float):
        return float.__float__(v)
    if isinstance(v, str):
        return str.__str__(v)
    raise TypeError(f"return value of type {t.__name__} is not JSON-serializable")
