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
"""
from __future__ import annotations

import builtins
import copy
import ctypes
import errno
import io
import json
import os
import resource
import select
import signal
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jail import _c, _ok, _enter_private_root  # noqa: E402  (the filesystem half of boot)

del sys.path[0]  # nothing the tests import should resolve to this directory

# prctl(2) constants (linux/prctl.h).
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP = 1, 4, 24
PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 38, 36
_STATUS_FD = 3            # where a test child reports how its program ended
_SETUP_DONE = b"ready"    # first line on that fd once the child is set up
_DETAIL_CHARS = 300
_SOURCE_NAME = "solution.py"

def _prctl(option: int, arg: int = 0) -> None:
    _ok(_c().prctl(option, arg, 0, 0, 0), f"prctl {option}")


def _emit(fd: int, record: dict) -> None:
    data = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8", "replace")
    while data:
        data = data[os.write(fd, data):]


def _short(text: str) -> str:
    return " ".join(str(text).split())[:_DETAIL_CHARS]


# ---------------------------------------------------------------- boot (trusted, privileged)

def boot(cfg: dict) -> None:
    res = cfg["results_fd"]
    os.umask(0o022)                     # the jail's directories must be traversable by the tests
    try:
        _prctl(PR_SET_DUMPABLE, 0)      # /proc/<boot>/fd must not hand out the results pipe
        with open(cfg["job"], encoding="utf-8") as f:
            job = json.load(f)
        # Only the fd travels on: the nonce is read by the server after the last test.
        nonce_fd = os.open(cfg["nonce"], os.O_RDONLY | os.O_CLOEXEC)
        if cfg["private_root"]:
            _enter_private_root(cfg)
        else:
            _prctl(PR_SET_CHILD_SUBREAPER, 1)   # orphans come back to us, to be killed
            signal.signal(signal.SIGTERM, lambda *_: (_kill_descendants(), os._exit(0)))
        pid_ns = os.getpid() == 1
    except BaseException as e:  # noqa: BLE001 - any failure here is the sandbox's, not the code's
        _emit(res, {"t": "boot_error", "msg": _short(f"{type(e).__name__}: {e}")})
        os._exit(70)
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            _server(cfg, job, nonce_fd, pid_ns)
        except BaseException as e:  # noqa: BLE001
            try:
                _emit(res, {"t": "server_error", "msg": _short(f"{type(e).__name__}: {e}")})
            except OSError:
                pass
            code = 71
        os._exit(code)
    status = _reap_until(pid)
    if not pid_ns:
        _kill_descendants()
    _emit(res, {"t": "exit", "server": _describe_status(status)})
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


# ---------------------------------------------------------------- server (trusted, unprivileged)

def _server(cfg: dict, job: dict, nonce_fd: int, pid_ns: bool) -> None:
    res = cfg["results_fd"]
    _drop_privileges(cfg)
    os.chdir(cfg["workdir"])
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _emit(res, {"t": "ready", "uid": os.getuid(), "pid": os.getpid()})
    run = _Server(cfg, job, pid_ns)
    if job["kind"] == "stdin":
        for i in range(len(job["inputs"])):
            _emit(res, run.stdin_test(i))
            run.sweep()
    else:
        i = 0
        while i < len(job["inputs"]):
            i = run.functional_segment(i)
            run.sweep()
    nonce = os.read(nonce_fd, 256).decode("ascii")
    _emit(res, {"t": "done", "nonce": nonce})


def _drop_privileges(cfg: dict) -> None:
    if cfg["uid"] is not None:
        os.setgroups([])
        os.setresgid(cfg["gid"], cfg["gid"], cfg["gid"])
        os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
        if os.getuid() != cfg["uid"] or os.geteuid() != cfg["uid"]:
            raise OSError("could not drop to the sandbox uid")
    if cfg["drop_caps"]:           # root of a user namespace: keep the uid, lose every capability
        for cap in range(64):
            if _c().prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                break
        _capset_zero()
    _prctl(PR_SET_NO_NEW_PRIVS, 1)  # setuid binaries and file caps grant nothing from here on
    _prctl(PR_SET_DUMPABLE, 0)      # no ptrace or /proc/<pid>/fd|mem access by the tests


def _capset_zero() -> None:
    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    _ok(_c().capset(ctypes.byref(Header(0x20080522, 0)), (Data * 2)()), "capset")


class _Server:
    """Runs the tests of one job, one supervised child at a time."""

    def __init__(self, cfg: dict, job: dict, pid_ns: bool):
        self.cfg, self.job, self.pid_ns = cfg, job, pid_ns
        self.timeout = cfg["timeout_s"]
        self.cap = cfg["output_bytes"]
        self.cpu_limit = cfg["limits"]["cpu"]

    def sweep(self) -> None:
        """Kill whatever the last test left running; only meaningful (and safe) in our own PID
        namespace, where kill(-1) reaches exactly the sandboxed processes except init and us."""
        if self.pid_ns:
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                pass

    # -- stdin tests ----------------------------------------------------------------------
    def stdin_test(self, i: int) -> dict:
        stdin = _memfd("stdin", self.job["inputs"][i].encode("utf-8", "replace"))
        out, err = _memfd("stdout"), _memfd("stderr")
        status_r, status_w = os.pipe()
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _child_setup(self.cfg, stdin, out, err, status_w)
            _run_program(self.job["code"])             # never returns
        os.close(stdin)
        os.close(status_w)
        report = bytearray()

        def on_data(chunk: bytes) -> bool:
            report.extend(chunk[: max(0, 4096 - len(report))])
            return True

        watch = _Watch(pid, status_r, self.timeout, on_data)
        setup, _, status_line = bytes(report).partition(b"\n")
        if setup != _SETUP_DONE:
            raise RuntimeError(f"test process setup failed ({watch.death()}); limits too low?")
        end, detail = _parse_status_line(status_line)
        sizes = os.fstat(out).st_size, os.fstat(err).st_size
        if end != "memory":
            if watch.timed_out or self._cpu_exhausted(watch):
                end, detail = "timeout", "wall time" if watch.timed_out else "CPU time limit"
            elif watch.signal == signal.SIGXFSZ or max(sizes) > self.cap or end == "output":
                end, detail = "output", f"output over {self.cap} bytes or file size limit"
            elif end is None:
                end, detail = "died", watch.death()
        record = {"t": "test", "i": i, "end": end, "detail": detail,
                  "out": os.pread(out, self.cap, 0).decode("utf-8", "replace"),
                  "err": os.pread(err, 400, max(0, sizes[1] - 400)).decode("utf-8", "replace"),
                  "ms": int((time.monotonic() - started) * 1000), "cpu_ms": int(watch.cpu * 1000)}
        os.close(out)
        os.close(err)
        return record

    def _cpu_exhausted(self, watch: "_Watch") -> bool:
        return watch.signal in (signal.SIGKILL, signal.SIGXCPU) and watch.cpu >= self.cpu_limit - 0.1

    # -- functional tests -----------------------------------------------------------------
    def functional_segment(self, start: int) -> int:
        """One child execs the code once and calls the function for tests start..n-1; if it
        dies, overruns or misbehaves, the current test fails and the caller starts a new child."""
        n = len(self.job["inputs"])
        out, err = _memfd("stdout"), _memfd("stderr")
        stdin = _memfd("stdin")
        status_r, status_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            _child_setup(self.cfg, stdin, out, err, status_w)
            _run_functional(self.job, start, self.cap)      # never returns
        for fd in (stdin, status_w, out, err):
            os.close(fd)
        seg = _Segment(self, start, n)
        watch = _Watch(pid, status_r, self.timeout, seg.on_data, deadline_of=seg)
        if not seg.set_up:
            raise RuntimeError(f"test process setup failed ({watch.death()}); limits too low?")
        if seg.next >= n:
            return n
        if seg.problem:
            end, detail = seg.problem
        elif watch.timed_out or self._cpu_exhausted(watch):
            end, detail = "timeout", "wall time" if watch.timed_out else "CPU time limit"
        elif watch.signal == signal.SIGXFSZ:
            end, detail = "output", "file size limit"
        else:
            end, detail = "died", watch.death()
        seg.emit(seg.next, end, detail, None)   # advances seg.next past the failed test
        return seg.next


class _Segment:
    """Parses a functional child's lines `index TAB end TAB payload` as they arrive."""

    def __init__(self, server: _Server, start: int, n: int):
        self.server, self.next, self.n = server, start, n
        self.buf = bytearray()
        self.problem: tuple[str, str] | None = None
        self.set_up = False
        self.deadline = time.monotonic() + server.timeout
        self.started = time.monotonic()

    def on_data(self, chunk: bytes) -> bool:
        self.buf.extend(chunk)
        while self.next < self.n:
            cut = self.buf.find(b"\n")
            if cut < 0:
                if len(self.buf) > self.server.cap + 4096:
                    self.problem = ("output", f"return value over {self.server.cap} bytes")
                    return False
                return True
            line, self.buf = bytes(self.buf[:cut]), self.buf[cut + 1:]
            if not self.set_up:
                self.set_up = line == _SETUP_DONE
                if self.set_up:
                    continue
            if not self.set_up or not self._take(line):
                self.problem = ("error", "the program wrote malformed harness records")
                return False
        return True

    def _take(self, line: bytes) -> bool:
        parts = line.decode("utf-8", "replace").split("\t", 2)
        if len(parts) != 3 or parts[1] not in ("ok", "error", "memory", "output"):
            return False
        if parts[0] == "*" and parts[1] != "ok":   # the module failed: so do all remaining tests
            while self.next < self.n:
                self.emit(self.next, parts[1], parts[2], None)
            return True
        if parts[0] != str(self.next):
            return False
        ok = parts[1] == "ok"
        self.emit(self.next, parts[1], "" if ok else parts[2], parts[2] if ok else None)
        return True

    def emit(self, i: int, end: str, detail: str, ret: str | None) -> None:
        now = time.monotonic()
        record = {"t": "test", "i": i, "end": end, "detail": _short(detail),
                  "ms": int((now - self.started) * 1000)}
        if ret is not None:
            record["ret"] = ret
        _emit(self.server.cfg["results_fd"], record)
        self.next, self.started, self.deadline = i + 1, now, now + self.server.timeout


class _Watch:
    """Wait for a child: stream its status pipe, SIGKILL its process group at the deadline."""

    def __init__(self, pid: int, fd: int, timeout: float, on_data, deadline_of=None):
        self.timed_out = False
        deadline = time.monotonic() + timeout
        pidfd = os.pidfd_open(pid)
        watch = [fd, pidfd]
        try:
            while True:
                end = deadline_of.deadline if deadline_of is not None else deadline
                left = end - time.monotonic()
                if left <= 0:
                    self.timed_out = True
                    break
                ready = select.select(watch, [], [], left)[0]
                if fd in ready:
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        watch.remove(fd)
                    elif on_data(chunk) is False:
                        break
                if pidfd in ready:
                    break
            _kill_group(pid)
            _, status, usage = os.wait4(pid, 0)
            self._drain(fd, on_data)
        finally:
            os.close(pidfd)
            os.close(fd)
        self.cpu = usage.ru_utime + usage.ru_stime
        self.signal = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        self.code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None

    @staticmethod
    def _drain(fd: int, on_data) -> None:
        # Escaped grandchildren may still hold the write end: never block on it.
        os.set_blocking(fd, False)
        for _ in range(64):
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                return
            if not chunk or on_data(chunk) is False:
                return

    def death(self) -> str:
        if self.signal is not None:
            return f"killed by {signal.Signals(self.signal).name}"
        return f"exited (status {self.code}) without finishing; os._exit or a killed harness"


def _kill_group(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _memfd(name: str, data: bytes = b"") -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    while data:
        data = data[os.write(fd, data):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _parse_status_line(report: bytes) -> tuple[str | None, str]:
    line = report.split(b"\n", 1)[0].decode("utf-8", "replace")
    end, _, detail = line.partition("\t")
    if end in ("ok", "exit", "error", "memory", "output"):
        return end, _short(detail)
    return None, ""


# ---------------------------------------------------------------- test child (untrusted code)

def _child_setup(cfg: dict, stdin: int, out: int, err: int, status: int) -> None:
    """In the fresh fork, before any model code: own session, fds 0-3 only, limits, clean stdio."""
    try:
        os.setsid()
        os.dup2(stdin, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.dup2(status, _STATUS_FD)
        os.closerange(_STATUS_FD + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)   # die with the server if it is killed
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
        sys.argv = [_SOURCE_NAME]
        # Written before any model code runs, so the program can neither fake its absence
        # nor remove it: without it, a failure is the harness's (unscorable), not the code's.
        _report(_SETUP_DONE.decode() + "\n")
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


def _run_program(code: str) -> None:
    """Run a stdin/stdout program as `__main__` in fresh globals, then report how it ended."""
    streams = (sys.stdout, sys.stderr)
    main = types.ModuleType("__main__")
    main.__dict__.update(__builtins__=builtins, __file__=_SOURCE_NAME)
    sys.modules["__main__"] = main
    try:
        exec(compile(code, _SOURCE_NAME, "exec", dont_inherit=True), main.__dict__)
        end, detail = "ok", ""
    except SystemExit as e:  # exiting after printing is a normal end of a program
        end, detail = ("ok", "") if e.code in (None, 0) else ("exit", f"exit status {e.code!r}")
    except BaseException as e:  # noqa: BLE001
        end, detail = _classify(e)
    end, detail = _finish(end, detail, streams)
    _report(f"{end}\t{_short(detail)}\n")
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
        if tb.tb_frame.f_code.co_filename == _SOURCE_NAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    where = f" (line {line})" if line else ""
    return "error", f"{type(e).__name__}: {e}{where}"


def _report(line: str) -> None:
    data = line.encode("utf-8", "replace")
    try:
        while data:
            data = data[os.write(_STATUS_FD, data):]
    except OSError:
        pass


def _run_functional(job: dict, start: int, cap: int) -> None:
    """Exec the module once (not as __main__), then call fn_name for tests start..n-1."""
    module = types.ModuleType("solution")
    module.__dict__.update(__builtins__=builtins, __file__=_SOURCE_NAME)
    sys.modules["solution"] = module
    try:
        exec(compile(job["code"], _SOURCE_NAME, "exec", dont_inherit=True), module.__dict__)
    except BaseException as e:  # noqa: BLE001 - SystemExit at import time fails too
        end, detail = ("error", "SystemExit while loading the module") if isinstance(e, SystemExit) else _classify(e)
        _report(f"*\t{end}\t{_short(detail)}\n")
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
        return f"{j}\terror\t{_short(f'SystemExit({e.code!r}) during the call')}\n"
    except BaseException as e:  # noqa: BLE001
        end, detail = _classify(e)
        return f"{j}\t{end}\t{_short(detail)}\n"


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


if __name__ == "__main__":
    boot(json.loads(sys.argv[1]))
