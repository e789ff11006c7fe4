"""Run model-written programs against hidden tests in isolated, resource-limited processes.

One run = one `runner.py` process tree in its own session. The strongest isolation this
machine allows is probed once per process and recorded in `CodeSandbox.isolation`:

- "root" (running as root): `unshare` gives fresh network, mount, PID, IPC and UTS
  namespaces; the program sees a private root filesystem and runs as a leased uid of its own
  (so RLIMIT_NPROC applies and every process of that uid can be killed after the verdict);
- "userns" (not root, user namespaces allowed): the same namespaces inside a user namespace;
  the program keeps the caller's uid but loses every capability;
- "plain" (neither): rlimits and process groups only, no network isolation; refused unless the
  caller passes `allow_unisolated_network=True`.

Expected outputs never leave this process: the child reports raw outputs and the verdict is
computed by `grade.py`. See docs/sandbox.md for what this protects against and what it does not.
"""
from __future__ import annotations

import fcntl
import functools
import json
import math
import os
import pwd
import secrets
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rolecall.errors import UserError
from rolecall.rewards.base import Score
from rolecall.rewards.code.spec import CodeTests

RUNNER = Path(__file__).with_name("runner.py")
DEFAULT_UID_BASE = 62000
UID_SLOTS = 256
# The jail must be up (before any model code runs) within this; otherwise the run is unscorable.
STARTUP_S = 15.0
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
_NAMESPACES = ("--net", "--mount", "--pid", "--ipc", "--uts", "--fork", "--kill-child")


class SandboxUnavailable(UserError, RuntimeError):
    """The isolation code rewards need cannot be had here, and the caller did not opt out."""


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one run. Every rlimit is set with hard = soft, so the code cannot raise it."""

    timeout_s: float = 6.0
    """Wall time per test. The whole run gets timeout_s * n_tests + grace_s, at most max_total_s."""
    memory_mb: int = 1024
    """RLIMIT_AS of every process the code runs in; running out is `memory_limit`."""
    cpu_s: int | None = None
    """RLIMIT_CPU of each test process; None means ceil(timeout_s) + 1."""
    file_size_mb: int = 16
    """RLIMIT_FSIZE: the largest file the code can write, stdout/stderr captures included."""
    nproc: int = 16
    """RLIMIT_NPROC: processes + threads of the sandbox uid; a fork bomb stops here."""
    nofile: int = 64
    """RLIMIT_NOFILE: open file descriptors per process."""
    output_bytes: int = 1 << 20
    """Captured stdout/stderr (or serialized return value) per test; more is `output_limit`."""
    grace_s: float = 2.0
    """Added once to the run's deadline (process start-up, per-test overheads)."""
    max_total_s: float = 300.0
    """Hard cap on a run's deadline, whatever the number of tests."""
    tmpfs_mb: int = 64
    """Size of each private tmpfs (run dir, /tmp, /dev/shm) with a private filesystem."""

    def __post_init__(self):
        for name in ("timeout_s", "memory_mb", "file_size_mb", "nproc", "nofile", "output_bytes",
                     "max_total_s", "tmpfs_mb"):
            if not getattr(self, name) > 0:
                raise ValueError(f"SandboxLimits.{name} must be > 0, got {getattr(self, name)!r}")
        if self.grace_s < 0 or (self.cpu_s is not None and self.cpu_s < 1):
            raise ValueError("SandboxLimits: grace_s must be >= 0 and cpu_s >= 1 (or None)")

    @property
    def cpu_limit(self) -> int:
        return self.cpu_s if self.cpu_s is not None else math.ceil(self.timeout_s) + 1

    def run_deadline_s(self, n_tests: int) -> float:
        return min(self.timeout_s * n_tests + self.grace_s, self.max_total_s)


@dataclass
class RunResult:
    """What one run produced, before any verdict: raw per-test records from the child."""

    records: list[dict[str, Any]] = field(default_factory=list)
    ready: bool = False          # the jail came up; from here on failures are the code's
    finished: bool = False       # the server printed this run's nonce after the last test
    killed: str | None = None    # "deadline" or "early_stop" when the parent ended the run
    infra_error: str | None = None
    server_exit: str | None = None
    sandbox_uid: int | None = None
    elapsed_s: float = 0.0


@dataclass(frozen=True)
class _Strategy:
    name: str
    prefix: tuple[str, ...]      # command line before the interpreter
    private_root: bool
    drop_uid: bool
    isolation: dict[str, str]


def _candidate_strategies() -> list[_Strategy]:
    """Strongest first; the first that passes its probe is used."""
    unshare = shutil.which("unshare", path="/usr/bin:/bin")
    fs = "private root: read-only system dirs and Python; tmpfs run dir, /tmp, /dev/shm"
    out = []
    if unshare and os.geteuid() == 0:
        out.append(_Strategy("root", (unshare, *_NAMESPACES), True, True,
                             {"network": "netns", "pid": "pidns", "filesystem": fs}))
    if unshare:
        out.append(_Strategy("userns", (unshare, "--user", "--map-root-user", *_NAMESPACES), True, False,
                             {"network": "netns", "pid": "pidns", "filesystem": fs,
                              "user": "same (root of a user namespace, all capabilities dropped)"}))
    out.append(_Strategy("plain", (), False, False,
                         {"network": "none", "pid": "process group + subreaper",
                          "filesystem": "host (the caller's own permissions)", "user": "same"}))
    return out


class CodeSandbox:
    """Runs programs against `CodeTests` with the best isolation available here.

    `run` grades one program (all_pass or pass_rate); `run_many` grades many through a pool
    of at most `max_workers` concurrent runs (threads only wait on child processes).
    """

    def __init__(self, limits: SandboxLimits = SandboxLimits(), max_workers: int | None = None,
                 allow_unisolated_network: bool = False, *, uid_base: int = DEFAULT_UID_BASE):
        self.limits = limits
        self.max_workers = max_workers or max(1, (os.cpu_count() or 2) // 2)
        self._uid_base = uid_base
        strategy, failures = _choose_strategy(uid_base)
        if strategy is None:
            raise SandboxUnavailable("cannot run code in any sandbox: " + "; ".join(failures))
        if strategy.isolation["network"] != "netns" and not allow_unisolated_network:
            why = "; ".join(failures) or "only the plain mode exists"
            raise SandboxUnavailable(
                f"code rewards need network isolation (a network namespace), not available here ({why}). "
                "Run as root, or allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
                "user.max_user_namespaces > 0), or opt in to running model code WITH network access: "
                "CodeSandbox(allow_unisolated_network=True).")
        self._strategy = strategy
        user = f"uid {uid_base}-{uid_base + UID_SLOTS - 1} (one per concurrent run)"
        self.isolation = {"strategy": strategy.name, "user": user, **strategy.isolation,
                          "rlimits": "CPU, AS, FSIZE, NPROC, NOFILE, CORE=0 (hard = soft)"}
        if failures:
            self.isolation["unavailable"] = "; ".join(failures)

    def execute(self, code: str, tests: CodeTests,
                on_record: Callable[[dict], bool] | None = None) -> RunResult:
        """Run the program once over all tests; `on_record` returning False ends the run early."""
        return _execute(self._strategy, self.limits, code, tests, on_record, self._uid_base)

    def run(self, code: str, tests: CodeTests, *, mode: str = "all_pass") -> Score:
        """Grade one program: all_pass (1.0 or 0.0, stops at the first failed test) or pass_rate."""
        from rolecall.rewards.code.grade import MODES, judge_record, verdict

        if mode not in MODES:
            raise ValueError(f"mode: unknown {mode!r}; allowed: {list(MODES)}")
        problem = _check_tests(tests)
        if problem:
            return Score(None, "unscorable", code, info={"reason": problem, "total": len(tests.inputs)})

        def judge_as_it_comes(record: dict) -> bool:
            # Judge now and drop the raw output (memory stays bounded); all_pass stops early.
            record["_judged"] = judge_record(record, tests)
            for key in ("out", "ret", "err"):
                record.pop(key, None)
            return mode != "all_pass" or record["_judged"][0] == "ok"

        try:
            result = self.execute(code, tests, judge_as_it_comes)
            return verdict(result, tests, mode=mode, code=code, isolation=self.isolation)
        except Exception as e:  # noqa: BLE001 - a sandbox bug must never become a reward of 0
            return Score(None, "unscorable", code, info={"reason": f"sandbox error: {type(e).__name__}: {e}"})

    def run_many(self, items: list[tuple[str, CodeTests]], *, mode: str = "all_pass") -> list[Score]:
        """Grade (code, tests) pairs, at most `max_workers` at a time; scores in input order."""
        if not items:
            return []
        with ThreadPoolExecutor(min(self.max_workers, len(items)), thread_name_prefix="rolecall-sandbox") as pool:
            return list(pool.map(lambda item: self.run(item[0], item[1], mode=mode), items))


def _check_tests(tests: CodeTests) -> str | None:
    if not tests.inputs:
        return "no tests: a program cannot be graded without tests"
    if len(tests.inputs) != len(tests.outputs):
        return f"{len(tests.inputs)} inputs but {len(tests.outputs)} outputs"
    if tests.kind == "functional" and not (tests.fn_name and tests.fn_name.isidentifier()):
        return f"functional tests need a function name, got {tests.fn_name!r}"
    if tests.kind == "stdin" and not all(isinstance(x, str) for x in (*tests.inputs, *tests.outputs)):
        return "stdin tests must have text inputs and outputs"
    return None


# ---------------------------------------------------------------- choosing the isolation

_PROBE_CODE = "import os, socket\nprint(os.getuid(), ' '.join(sorted(n for _, n in socket.if_nameindex())))\n"
_probe_lock = threading.Lock()
_probe_cache: dict[tuple, tuple[_Strategy | None, list[str]]] = {}


def _choose_strategy(uid_base: int) -> tuple[_Strategy | None, list[str]]:
    """Probe the candidates once per process (a real run of a tiny program) and cache."""
    candidates = _candidate_strategies()
    key = (tuple(c.name for c in candidates), uid_base)
    with _probe_lock:
        if key not in _probe_cache:
            failures: list[str] = []
            chosen = None
            for strategy in candidates:
                problem = _probe(strategy, uid_base)
                if problem is None:
                    chosen = strategy
                    break
                failures.append(f"{strategy.name}: {problem}")
            _probe_cache[key] = (chosen, failures)
        return _probe_cache[key]


def _probe(strategy: _Strategy, uid_base: int) -> str | None:
    tests = CodeTests("stdin", ("",), ("",))
    result = _execute(strategy, SandboxLimits(timeout_s=10), _PROBE_CODE, tests, None, uid_base)
    if result.infra_error or not result.records:
        return result.infra_error or "the probe produced no result"
    record = result.records[0]
    if record["end"] != "ok" or not result.finished:
        return f"the probe program failed: {record.get('detail')} {record.get('err', '')[-200:]}"
    uid, _, interfaces = record["out"].strip().partition(" ")
    if strategy.drop_uid and uid == "0":
        return "the program still ran as root"
    if strategy.isolation["network"] == "netns" and interfaces != "lo":
        return f"the network is not isolated (interfaces: {interfaces})"
    return None


# ---------------------------------------------------------------- one run

def _execute(strategy: _Strategy, limits: SandboxLimits, code: str, tests: CodeTests,
             on_record: Callable[[dict], bool] | None, uid_base: int) -> RunResult:
    started = time.monotonic()
    result = RunResult()
    lease = host = proc = None
    try:
        lease = _lease_uid(uid_base) if strategy.drop_uid else None
        result.sandbox_uid = lease.uid if lease else os.geteuid()
        host = Path(tempfile.mkdtemp(prefix="run-", dir=_private_dir(_base_dir())))
        nonce = secrets.token_hex(16)
        cfg = _prepare(host, strategy, limits, code, tests, nonce, lease)
        proc, results_r = _spawn(strategy, cfg, host)
        _collect(result, results_r, len(tests.inputs), limits, nonce, on_record)
    except Exception as e:  # noqa: BLE001 - cannot spawn, bad channel, ...: the sandbox failed
        result.infra_error = f"{type(e).__name__}: {e}"
    finally:
        _teardown(proc, lease, host, result)
    result.elapsed_s = time.monotonic() - started
    return result


def _prepare(host: Path, strategy: _Strategy, limits: SandboxLimits, code: str, tests: CodeTests,
             nonce: str, lease: _Lease | None) -> dict:
    """Write the job (code and inputs, never expected outputs) and the boot configuration."""
    _write_private(host / "job.json", json.dumps(
        {"kind": tests.kind, "code": code, "inputs": list(tests.inputs), "fn_name": tests.fn_name}))
    _write_private(host / "nonce", nonce)
    if strategy.private_root:
        workdir = "/sandbox"
        (host / "root").mkdir(mode=0o700)
    else:
        workdir = str(host / "work")
        os.mkdir(workdir, 0o700)
    uid = lease.uid if lease else None
    return {
        "job": str(host / "job.json"), "nonce": str(host / "nonce"),
        "private_root": strategy.private_root, "root_mount": str(host / "root"),
        "ro_paths": list(_read_only_paths()), "workdir": workdir,
        "uid": uid, "gid": uid, "drop_caps": strategy.name == "userns",
        "timeout_s": limits.timeout_s, "output_bytes": limits.output_bytes, "tmpfs_mb": limits.tmpfs_mb,
        "limits": {"cpu": limits.cpu_limit, "as": limits.memory_mb << 20,
                   # captures must be able to exceed the cap, so that exceeding it is visible
                   "fsize": max(limits.file_size_mb << 20, limits.output_bytes + 1),
                   "nproc": limits.nproc, "nproc_relative": strategy.name == "plain",
                   "nofile": limits.nofile},
    }


def _spawn(strategy: _Strategy, cfg: dict, host: Path) -> tuple[subprocess.Popen, int]:
    results_r, results_w = os.pipe()
    cfg["results_fd"] = results_w
    argv = [*strategy.prefix, _python(), "-I", "-S", str(RUNNER), json.dumps(cfg)]
    try:
        with open(host / "boot.log", "wb") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                                    cwd=host, env=_child_env(cfg["workdir"]), pass_fds=(results_w,),
                                    start_new_session=True, close_fds=True)
    except BaseException:
        os.close(results_r)
        raise
    finally:
        os.close(results_w)
    return proc, results_r


def _child_env(workdir: str) -> dict[str, str]:
    """All the program's environment: no tokens, keys or trainer settings get through.

    MALLOC_ARENA_MAX: glibc reserves 64 MiB of address space per thread arena, which would
    make RLIMIT_AS fail threaded programs long before they use the memory."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
            "PYTHONIOENCODING": "utf-8", "PYTHONDONTWRITEBYTECODE": "1", "HOME": workdir,
            "TMPDIR": workdir, "MALLOC_ARENA_MAX": "2", "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _collect(result: RunResult, fd: int, n: int, limits: SandboxLimits, nonce: str,
             on_record: Callable[[dict], bool] | None) -> None:
    """Read the results channel until EOF, the deadline, or an early stop."""
    buf = bytearray()
    deadline = time.monotonic() + STARTUP_S
    poller = select.poll()          # not select(): a trainer's fds can be numbered past 1024
    poller.register(fd, select.POLLIN)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                if result.ready:
                    result.killed = "deadline"
                else:
                    result.infra_error = f"the sandbox did not start within {STARTUP_S:.0f} s"
                return
            if not poller.poll(left * 1000):
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return
            buf.extend(chunk)
            while (cut := buf.find(b"\n")) >= 0:
                record = json.loads(bytes(buf[:cut]))
                del buf[:cut + 1]
                if record.get("t") == "ready" and not result.ready:
                    result.ready = True
                    deadline = time.monotonic() + limits.run_deadline_s(n)
                elif not _take(result, record, n, nonce, on_record):
                    return
            if len(buf) > 8 * limits.output_bytes + (1 << 20):
                raise RuntimeError("oversized record on the results channel")
    finally:
        os.close(fd)


def _take(result: RunResult, record: dict, n: int, nonce: str,
          on_record: Callable[[dict], bool] | None) -> bool:
    kind = record.get("t")
    if kind == "test":
        if not result.ready or record.get("i") != len(result.records) or len(result.records) >= n:
            raise RuntimeError(f"results out of order: {str(record)[:80]}")
        result.records.append(record)
        if on_record is not None and on_record(record) is False:
            result.killed = "early_stop"
            return False
    elif kind == "done":
        result.finished = len(result.records) == n and secrets.compare_digest(str(record.get("nonce")), nonce)
    elif kind == "exit":
        result.server_exit = record.get("server")
    elif kind in ("boot_error", "server_error"):
        result.infra_error = f"{kind}: {record.get('msg')}"
    return True


def _teardown(proc: subprocess.Popen | None, lease: _Lease | None, host: Path | None, result: RunResult) -> None:
    """Kill everything the run started, whatever happened, then remove its files."""
    if proc is not None:
        _kill_group(proc.pid)     # before reaping, so that the group id cannot have been reused
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            result.infra_error = result.infra_error or "the sandbox did not exit after SIGKILL"
    if lease is not None:
        try:
            _kill_uid(lease.uid)
        except (OSError, subprocess.SubprocessError):
            pass    # no helper could be spawned; the PID namespace already took the run down
        lease.release()
    if host is not None:
        if result.infra_error:
            try:
                log = (host / "boot.log").read_bytes()[:500].decode("utf-8", "replace").strip()
                result.infra_error += f" [{log}]" if log else ""
            except OSError:
                pass
        shutil.rmtree(host, ignore_errors=True)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# ---------------------------------------------------------------- uids, dirs, interpreter

class _Lease:
    """Exclusive use of one sandbox uid, across threads and processes (an flock on a file)."""

    def __init__(self, uid: int, fd: int):
        self.uid, self._fd = uid, fd

    def release(self) -> None:
        os.close(self._fd)


_swept_uids: set[int] = set()


def _lease_uid(base: int) -> _Lease:
    lock_dir = _private_dir(Path("/run/rolecall-sandbox") if os.path.isdir("/run")
                            else Path(tempfile.gettempdir()) / "rolecall-sandbox-locks")
    for uid in range(base, base + UID_SLOTS):
        if _uid_has_owner(uid):
            continue
        fd = os.open(lock_dir / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        if uid not in _swept_uids:   # a run killed along with an earlier trainer may linger
            _kill_uid(uid)
            _swept_uids.add(uid)
        return _Lease(uid, fd)
    raise OSError(f"all {UID_SLOTS} sandbox uids from {base} are busy")


@functools.lru_cache(maxsize=None)
def _uid_has_owner(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        return False


def _kill_uid(uid: int) -> None:
    """SIGKILL every process of `uid`: a helper switches to that uid and calls kill(-1)."""
    kill = shutil.which("kill", path="/usr/bin:/bin")
    if kill is None:
        return  # the PID namespace already took everything down with the run
    subprocess.run([kill, "-9", "-1"], user=uid, group=uid, extra_groups=[], env={},
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   close_fds=True, timeout=10, check=False)


def _base_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"rolecall-sandbox-{os.geteuid()}"


def _private_dir(path: Path) -> Path:
    """Create (or check) a directory only we can enter; refuse one someone else prepared."""
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise OSError(f"{path} is not a private directory of uid {os.geteuid()}")
    return path


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with open(fd, "w", encoding="utf-8") as f:
        f.write(text)


@functools.lru_cache(maxsize=None)
def _python() -> str:
    """The base interpreter (not a venv wrapper): the program gets the standard library only."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


@functools.lru_cache(maxsize=None)
def _read_only_paths() -> tuple[str, ...]:
    """System dirs plus the interpreter's prefix when it lives elsewhere (e.g. under /root)."""
    covered = [os.path.realpath(d) for d in _SYSTEM_DIRS]
    extra = []
    for path in (os.path.realpath(sys.base_prefix), os.path.dirname(_python())):
        if not any(path == c or path.startswith(c + "/") for c in covered + extra):
            extra.append(path)
    return (*_SYSTEM_DIRS, *extra)
