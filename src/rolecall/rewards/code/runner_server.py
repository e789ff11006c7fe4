"""Server of the code sandbox's runner: the trusted, unprivileged process that runs every test.

Stdlib only, never imports rolecall: a sibling script of `runner.py`, imported from this
directory at start-up (before the private root hides it). `runner.py`'s boot forks it after
building the jail; it drops privileges, then forks one test child per test (functional tests
share one child until it fails), feeds stdin and captures stdout/stderr through memory files,
enforces the per-test wall time, and writes *raw* outputs to the results pipe, then the run's
nonce. It never sees expected outputs and never runs model code itself. Separate from the boot
(privileged, pid 1) and from the test child (untrusted) because it is a third trust level.
"""
from __future__ import annotations

import ctypes
import os
import resource
import select
import signal
import time

from jail import PR_CAPBSET_DROP, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, check, libc, prctl
from runner_child import child_setup, run_functional, run_program
from runner_wire import SETUP_DONE, emit, short


def serve(cfg: dict, job: dict, nonce_fd: int, pid_ns: bool) -> None:
    res = cfg["results_fd"]
    _drop_privileges(cfg)
    os.chdir(cfg["workdir"])
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    emit(res, {"t": "ready", "uid": os.getuid(), "pid": os.getpid()})
    run = _Server(cfg, job, pid_ns)
    if job["kind"] == "stdin":
        for i in range(len(job["inputs"])):
            emit(res, run.stdin_test(i))
            run.sweep()
    else:
        i = 0
        while i < len(job["inputs"]):
            i = run.functional_segment(i)
            run.sweep()
    nonce = os.read(nonce_fd, 256).decode("ascii")
    emit(res, {"t": "done", "nonce": nonce})


def _drop_privileges(cfg: dict) -> None:
    if cfg["uid"] is not None:
        os.setgroups([])
        os.setresgid(cfg["gid"], cfg["gid"], cfg["gid"])
        os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
        if os.getuid() != cfg["uid"] or os.geteuid() != cfg["uid"]:
            raise OSError("could not drop to the sandbox uid")
    if cfg["drop_caps"]:           # root of a user namespace: keep the uid, lose every capability
        for cap in range(64):
            if libc().prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                break
        _capset_zero()
    prctl(PR_SET_NO_NEW_PRIVS, 1)   # setuid binaries and file caps grant nothing from here on
    prctl(PR_SET_DUMPABLE, 0)       # no ptrace or /proc/<pid>/fd|mem access by the tests


def _capset_zero() -> None:
    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    check(libc().capset(ctypes.byref(Header(0x20080522, 0)), (Data * 2)()), "capset")


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
            child_setup(self.cfg, stdin, out, err, status_w)
            run_program(self.job["code"])              # never returns
        os.close(stdin)
        os.close(status_w)
        report = bytearray()

        def on_data(chunk: bytes) -> bool:
            report.extend(chunk[: max(0, 4096 - len(report))])
            return True

        watch = _Watch(pid, status_r, self.timeout, on_data)
        setup, _, status_line = bytes(report).partition(b"\n")
        if setup != SETUP_DONE:
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
            child_setup(self.cfg, stdin, out, err, status_w)
            run_functional(self.job, start, self.cap)       # never returns
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
                self.set_up = line == SETUP_DONE
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
        record = {"t": "test", "i": i, "end": end, "detail": short(detail),
                  "ms": int((now - self.started) * 1000)}
        if ret is not None:
            record["ret"] = ret
        emit(self.server.cfg["results_fd"], record)
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
        return end, short(detail)
    return None, ""
