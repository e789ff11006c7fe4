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
computed by `verdicts.py`. See docs/sandbox.md for what this protects against and what it does not.

This module chooses the isolation and starts a run; the rest of a run lives beside it:
`limits.py` (SandboxLimits, SandboxUnavailable), `channel.py` (reading the results pipe,
RunResult), `uids.py` (leasing sandbox uids), `private_fs.py` (private run dirs and files),
`teardown.py` (killing and cleaning up after a run) and the child-side scripts `runner.py`,
`runner_server.py`, `runner_child.py`, `runner_wire.py`, `jail.py`.
"""
from __future__ import annotations

import functools
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rolecall.rewards.base import Score
from rolecall.rewards.code.channel import STARTUP_S, RunResult, collect
from rolecall.rewards.code.limits import SandboxLimits, SandboxUnavailable
from rolecall.rewards.code.private_fs import private_dir, write_private
from rolecall.rewards.code.spec import CodeTests
from rolecall.rewards.code.teardown import teardown
from rolecall.rewards.code.uids import DEFAULT_UID_BASE, UID_SLOTS, Lease, lease_uid
from rolecall.rewards.code.verdicts import MODES, judge_record, verdict

# Re-exported: callers and tests import these from here.
__all__ = ["DEFAULT_UID_BASE", "RUNNER", "STARTUP_S", "UID_SLOTS", "CodeSandbox", "RunResult", "SandboxLimits",
           "SandboxUnavailable"]

RUNNER = Path(__file__).with_name("runner.py")
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
_NAMESPACES = ("--net", "--mount", "--pid", "--ipc", "--uts", "--fork", "--kill-child")



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
        lease = lease_uid(uid_base) if strategy.drop_uid else None
        result.sandbox_uid = lease.uid if lease else os.geteuid()
        host = Path(tempfile.mkdtemp(prefix="run-", dir=private_dir(_base_dir())))
        nonce = secrets.token_hex(16)
        cfg = _prepare(host, strategy, limits, code, tests, nonce, lease)
        proc, results_r = _spawn(strategy, cfg, host)
        collect(result, results_r, len(tests.inputs), limits, nonce, on_record)
    except Exception as e:  # noqa: BLE001 - cannot spawn, bad channel, ...: the sandbox failed
        result.infra_error = f"{type(e).__name__}: {e}"
    finally:
        teardown(proc, lease, host, result)
    result.elapsed_s = time.monotonic() - started
    return result


def _prepare(host: Path, strategy: _Strategy, limits: SandboxLimits, code: str, tests: CodeTests,
             nonce: str, lease: Lease | None) -> dict:
    """Write the job (code and inputs, never expected outputs) and the boot configuration."""
    write_private(host / "job.json", json.dumps(
        {"kind": tests.kind, "code": tests.program(code), "inputs": list(tests.inputs), "fn_name": tests.fn_name}))
    write_private(host / "nonce", nonce)
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



# ---------------------------------------------------------------- dirs, interpreter

def _base_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"rolecall-sandbox-{os.geteuid()}"



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
