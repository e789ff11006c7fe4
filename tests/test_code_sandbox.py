"""Code sandbox: nine faults of untrusted, model-written code as tests, numbered #1-#9 in the
section headers below (timeouts, floods, memory, forks, early exits, tampering, strict
comparison, network/secrets/files, infrastructure failures).

Every run here is real: model-like programs are executed in the sandbox with short limits.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest

from rolecall.rewards.code import (CodeSandbox, CodeTests, SandboxLimits, SandboxUnavailable, extract_code,
                                   grade_code)
from rolecall.rewards.code import sandbox as sandbox_mod
from rolecall.rewards.code.grade import compare_stdout, json_matches, verdict


def _matches(got: str, expected: str) -> bool:
    return compare_stdout(got, expected)[0] == "ok"
from rolecall.rewards.code.sandbox import DEFAULT_UID_BASE, RUNNER, UID_SLOTS, RunResult

T = 1.0            # per-test wall time in these tests
G = 1.0            # grace
# A printing loop must hit the deadline long before RLIMIT_FSIZE (32 MiB at ~8 MB/s).
LIMITS = SandboxLimits(timeout_s=T, grace_s=G, memory_mb=256, file_size_mb=32)
ADD = CodeTests("stdin", ("1 2\n", "10 20\n", "-5 5\n"), ("3\n", "30\n", "0\n"))
ADD_OK = "a, b = map(int, input().split())\nprint(a + b)\n"
# A problem whose answers the programs below cannot know (they never compute them).
SECRET = CodeTests("stdin", ("alpha\n", "beta\n"), ("8c51f0e2\n", "19d4a7b3\n"))
SECRET_FN = CodeTests("functional", ([3],), (9187,), "solve")


@pytest.fixture(scope="module")
def sb():
    try:
        return CodeSandbox(LIMITS, max_workers=2)
    except SandboxUnavailable as e:
        pytest.skip(f"no isolated sandbox on this machine: {e}")


def _sandbox_pids() -> list[int]:
    """Processes of the sandbox: any sandbox uid, or anything running our runner.py."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
        if DEFAULT_UID_BASE <= uid < DEFAULT_UID_BASE + UID_SLOTS or str(RUNNER).encode() in cmdline:
            found.append(int(entry))
    return found


def assert_nothing_left(within: float = 2.0) -> None:
    deadline = time.monotonic() + within
    while (left := _sandbox_pids()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, f"sandbox processes survived: {left}"


def _run_dirs() -> set[str]:
    base = sandbox_mod._base_dir()
    return set(os.listdir(base)) if base.exists() else set()


# ------------------------------------------------------------------ extraction and verdicts

def test_extract_code_takes_last_closed_python_block():
    text = ("<think>```python\nprint('thinking')\n```</think>Here:\n```python\nprint(1)\n```\n"
            "and better:\n```py\nprint(2)\n```\nSample output:\n```text\n2\n```\n```python\nprint(3")
    assert extract_code(text) == "print(2)\n"
    assert extract_code("```\nx = 1\n```") == "x = 1\n"
    assert extract_code("no code here") is None
    assert extract_code("```python\nunclosed") is None
    assert extract_code("<think>```python\nprint(1)\n```</think> nothing after") is None


def test_stdout_comparison_is_strict():
    assert _matches("3 4\n5\n", "3 4\n5")
    assert _matches("3 4  \r\n5\r\n\n\n", "3 4\n5\n")        # trailing spaces, CRLF, blank tail
    assert not _matches("3 4\n", "3 4\n5\n")                 # a prefix
    assert not _matches("3 4\n5\n6\n", "3 4\n5\n")           # extra lines
    assert not _matches("", "3\n")                           # nothing
    assert not _matches(" 3\n", "3\n")                       # leading space matters
    assert not _matches("3\n\n5\n", "3\n5\n")                # inner blank line matters


def test_json_comparison_has_exact_types():
    assert json_matches([1, [2, 3]], [1, [2, 3]])
    assert not json_matches(True, 1) and not json_matches(1, True) and not json_matches(0, False)
    assert not json_matches("1", 1) and not json_matches(None, 0) and not json_matches([], {})
    assert json_matches(3.0, 3) and json_matches(0.1 + 0.2, 0.3)   # numbers: 1e-9 tolerance
    assert not json_matches(3.001, 3)
    assert json_matches({"a": [1.0]}, {"a": [1]}) and not json_matches({"a": 1}, {"a": 1, "b": 2})
    assert json_matches(5, [5]) and not json_matches([5], 5)       # TACO one-element-list quirk
    assert not json_matches(10 ** 400, 1e300)


def test_status_precedence_and_missing_nonce():
    def run(*ends, **kw):
        records = [{"i": i, "end": e, "detail": e, "out": "3\n"} for i, e in enumerate(ends)]
        return verdict(RunResult(records=records, ready=True, **kw), CodeTests("stdin", ("",) * 4, ("3",) * 4))
    assert run("ok", "timeout", "memory", "error").status == "memory_limit"
    assert run("ok", "error", "output", "timeout").status == "timeout"
    assert run("ok", "error", "output", "ok", finished=True).status == "output_limit"
    assert run("ok", "ok", "ok", "ok", finished=True).value == 1.0
    missing_nonce = run("ok", "ok", "ok", "ok", finished=False)
    assert (missing_nonce.value, missing_nonce.status) == (0.0, "runtime_error")
    assert run("ok", "ok", killed="deadline").status == "timeout"
    assert verdict(RunResult(), ADD).value is None                 # never ready: unscorable


# ------------------------------------------------------------------ good solutions

def test_good_stdin_solution_scores_one(sb):
    score = grade_code(f"<think>hmm</think>\n```python\n{ADD_OK}```", ADD, sandbox=sb)
    assert (score.value, score.status) == (1.0, "ok"), score
    assert score.extracted == ADD_OK
    assert score.info["passed"] == score.info["executed"] == score.info["total"] == 3
    assert score.info["network"] == "netns"
    assert_nothing_left()


@pytest.mark.parametrize("code", [
    "def add(a, b):\n    return a + b\n",
    "class Solution:\n    def add(self, a, b):\n        return a + b\n",
    "import sys\ndef add(a, b):\n    return a + b\nif __name__ == '__main__':\n    sys.exit(add(*map(int, input().split())))\n",
])
def test_good_functional_solution_scores_one(sb, code):
    tests = CodeTests("functional", ([1, 2], [3, 4], [-1, 1]), (3, 7, 0), "add")
    score = sb.run(code, tests)
    assert (score.value, score.status) == (1.0, "ok"), score


def test_functional_return_values_keep_their_types(sb):
    tests = CodeTests("functional", ([2],), ([[2, 4], {"k": True}],), "f")
    assert sb.run("def f(n):\n    return ((n, 2 * n), {'k': True})\n", tests).value == 1.0  # tuples -> lists
    assert sb.run("def f(n):\n    return [[n, 4], {'k': 1}]\n", tests).value == 0.0          # 1 is not True
    assert sb.run("def f(n):\n    return [{n, 4}, {'k': True}]\n", tests).status == "runtime_error"  # a set


def test_pass_rate_counts_failed_and_unexecuted_tests(sb):
    code = "import time\na, b = map(int, input().split())\nif a == 10: time.sleep(30)\nprint(a + b if a > 0 else 1)\n"
    rate = sb.run(code, ADD, mode="pass_rate")
    assert rate.value == pytest.approx(1 / 3) and rate.status == "timeout"
    assert rate.info["first_failure"]["test"] == 1
    strict = sb.run(code, ADD, mode="all_pass")
    assert (strict.value, strict.status) == (0.0, "timeout")
    assert strict.info["executed"] == 2             # all_pass stops at the first failure


def test_wrong_output_reports_a_short_first_failure(sb):
    score = sb.run("print(3)\n", ADD)
    assert (score.value, score.status) == (0.0, "wrong")
    assert score.info["first_failure"] == {"test": 1, "status": "wrong", "reason": "line 1: got '3', expected '30'"}


def test_grade_code_uses_a_shared_isolated_sandbox_by_default(sb, monkeypatch):
    monkeypatch.setattr("rolecall.rewards.code.grade._default", None)
    score = grade_code(f"```python\n{ADD_OK}```", ADD, mode="pass_rate")
    assert (score.value, score.status, score.info["network"]) == (1.0, "ok", "netns")


def test_no_code_block_is_no_answer(sb):
    score = grade_code("I think the answer is 3.", ADD, sandbox=sb)
    assert (score.value, score.status, score.extracted) == (0.0, "no_answer", None)


# ------------------------------------------------------------------ #1 infinite loops

@pytest.mark.parametrize("code", ["while True: pass\n", "while True: print(1)\n"])
def test_infinite_loops_are_killed_in_time(sb, code):
    started = time.monotonic()
    score = sb.run(code, ADD)
    assert time.monotonic() - started < T + G
    assert (score.value, score.status) == (0.0, "timeout"), score
    assert_nothing_left()


def test_64_bad_programs_in_a_small_pool_leave_the_trainer_alone():
    limits = SandboxLimits(timeout_s=0.3, grace_s=0.5, memory_mb=256, file_size_mb=32)
    pool = CodeSandbox(limits, max_workers=4)
    items = [("while True: pass\n" if k % 2 else "while True: print(1)\n", ADD) for k in range(64)]
    gaps, uids_seen, stop = [0.0], [0], threading.Event()

    def heartbeat():
        last = time.monotonic()
        while not stop.is_set():
            time.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    def sampler():
        while not stop.is_set():
            uids = set()
            for pid in _sandbox_pids():
                try:
                    uids.add(Path(f"/proc/{pid}/status").read_text().split("Uid:")[1].split()[0])
                except OSError:
                    pass
            uids_seen.append(len(uids - {"0"}))
            time.sleep(0.05)

    threads = [threading.Thread(target=f, daemon=True) for f in (heartbeat, sampler)]
    for t in threads:
        t.start()
    started = time.monotonic()
    try:
        scores = pool.run_many(items)
    finally:
        stop.set()
    elapsed = time.monotonic() - started
    assert [s.value for s in scores] == [0.0] * 64
    assert {s.status for s in scores} == {"timeout"}
    # One at a time cannot finish before 64 full timeouts; the pool's 4 at a time ideally take a
    # quarter of that plus the kills' grace, which a busy machine overshot (13.0 s for 12.8 s).
    assert elapsed < 64 * limits.timeout_s, f"{elapsed:.1f} s: the pool ran the programs one at a time"
    assert max(gaps) < 0.5, f"trainer thread stalled for {max(gaps):.2f} s"
    assert max(uids_seen) <= 4                     # never more runs at once than the pool allows
    assert_nothing_left()


# ------------------------------------------------------------------ #2 output floods

@pytest.mark.parametrize("code", [
    "import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(chunk)\n",
    "import os\nchunk = b'y' * (1 << 20)\nfor _ in range(1024):\n    os.write(2, chunk)\n",
    "f = open('huge.bin', 'wb')\nfor _ in range(1024):\n    f.write(b'z' * (1 << 20))\n",
    "f = open('/tmp/huge.bin', 'wb')\nfor _ in range(1024):\n    f.write(b'z' * (1 << 20))\n",
])
def test_output_floods_are_capped_and_leave_no_files(sb, code):
    before = _run_dirs()
    started = time.monotonic()
    result = sb.execute(code, SECRET)
    score = sb.run(code, SECRET)
    assert time.monotonic() - started < 2 * (T + G)
    assert (score.value, score.status) == (0.0, "output_limit"), score
    for record in result.records:
        assert len(record["out"]) <= LIMITS.output_bytes and len(record["err"]) <= 1000
    assert _run_dirs() <= before                   # the run's directory is gone
    assert not Path("/tmp/huge.bin").exists()
    assert_nothing_left()


# ------------------------------------------------------------------ #3 memory

@pytest.mark.parametrize("code", [
    "blocks = []\nwhile True:\n    blocks.append(bytearray(10 ** 7))\n",
    "s = 'x' * 10 ** 10\n",
    "import threading\nthreading.stack_size(1 << 28)\nts = [threading.Thread(target=input) for _ in range(4)]\n"
    "[t.start() for t in ts]\n",
])
def test_memory_bombs_end_as_memory_limit(sb, code):
    score = sb.run(code, SECRET)
    assert (score.value, score.status) in {(0.0, "memory_limit"), (0.0, "runtime_error")}, score
    if "threading" not in code:       # failing to start a thread is a RuntimeError, not a MemoryError
        assert score.status == "memory_limit"
    assert_nothing_left()


def test_limits_are_hard_and_cannot_be_raised(sb):
    code = ("import resource as r\n"
            "names = ['RLIMIT_CPU', 'RLIMIT_AS', 'RLIMIT_FSIZE', 'RLIMIT_NPROC', 'RLIMIT_NOFILE', 'RLIMIT_CORE']\n"
            "print(all(r.getrlimit(getattr(r, n))[0] == r.getrlimit(getattr(r, n))[1] for n in names))\n"
            "print(r.getrlimit(r.RLIMIT_AS)[0] >> 20, r.getrlimit(r.RLIMIT_NPROC)[0], r.getrlimit(r.RLIMIT_CORE)[0])\n"
            "try:\n    r.setrlimit(r.RLIMIT_AS, (r.RLIM_INFINITY, r.RLIM_INFINITY))\n    print('raised')\n"
            "except (ValueError, OSError):\n    print('refused')\n")
    out = sb.execute(code, SECRET).records[0]["out"]
    assert out.split("\n")[:3] == ["True", f"256 {LIMITS.nproc} 0", "refused"]


# ------------------------------------------------------------------ #4 fork bombs, escapes

def test_fork_bomb_is_capped_and_nothing_survives(sb):
    code = "import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.001)\n"
    peak, stop = [0], threading.Event()

    def count():
        while not stop.is_set():
            peak[0] = max(peak[0], len(_sandbox_pids()))
            time.sleep(0.02)

    watcher = threading.Thread(target=count, daemon=True)
    watcher.start()
    try:
        score = sb.run(code, SECRET)
    finally:
        stop.set()
        watcher.join()
    assert (score.value, score.status) == (0.0, "timeout")
    # nproc tasks of the sandbox uid + root-owned unshare and boot
    assert 2 < peak[0] <= LIMITS.nproc + 2, peak
    assert_nothing_left()


ESCAPE = ("import os, time\n"
          "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(60)\n    os._exit(0)\n"
          "a, b = map(int, input().split())\nprint(a + b)\n")


def test_double_forked_setsid_sleeper_does_not_survive(sb):
    score = sb.run(ESCAPE, ADD)
    assert (score.value, score.status) == (1.0, "ok")    # leaving a sleeper behind is not an error...
    assert_nothing_left()                                # ...but it does not survive the verdict


# ------------------------------------------------------------------ #5 early exits

@pytest.mark.parametrize("code", [
    "import sys\nsys.exit(0)\n",
    "import os\nos._exit(0)\n",
    "import os\nos._exit(111)\n",                      # the harness's own setup-failure code
    "raise SystemExit\n",
    "import os\nos.kill(os.getpid(), 9)\n",
    "print('oops'\n",
    "import os\nos.kill(os.getppid(), 9)\n",                 # kill the harness itself
    "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\n",   # freeze it
    "import os\nprint('8c51f0e2', flush=True)\nos._exit(0)\n",  # right once, then skip the rest
])
def test_early_exit_never_passes(sb, code):
    score = sb.run(code, SECRET, mode="pass_rate")
    assert score.value < 1.0 and score.status != "ok", score      # so all_pass scores 0
    assert_nothing_left()


@pytest.mark.parametrize("code", [
    "import sys\nsys.exit(0)\ndef solve(n): return 9187\n",
    "import os\ndef solve(n):\n    os._exit(0)\n",
    "def solve(n):\n    raise SystemExit(0)\n",
])
def test_functional_early_exit_never_passes(sb, code):
    assert sb.run(code, SECRET_FN).value == 0.0


# ------------------------------------------------------------------ #6 tampering

FAKE_RESULTS = """
import gc, json, os, sys
cands = set()
for obj in gc.get_objects():
    if isinstance(obj, dict):
        for v in obj.values():
            if isinstance(v, str) and len(v) == 32:
                cands.add(v)
frame = sys._getframe()
while frame:
    for k, v in frame.f_locals.items():
        if isinstance(v, str) and len(v) == 32:
            cands.add(v)
    frame = frame.f_back
lines = [json.dumps({"t": "test", "i": i, "end": "ok", "detail": "", "out": "8c51f0e2\\n", "ret": "9187"}) for i in range(2)]
lines += [json.dumps({"t": "done", "nonce": c}) for c in cands]
payload = ("\\n".join(lines) + "\\n").encode()
for fd in range(3, 64):
    try:
        os.write(fd, payload)
    except OSError:
        pass
for fd in range(3, 64):
    for target in (f"/proc/{os.getppid()}/fd/{fd}", f"/proc/1/fd/{fd}"):
        try:
            with open(target, "wb") as f:
                f.write(payload)
        except OSError:
            pass
os._exit(0)
"""


@pytest.mark.parametrize("code", [
    FAKE_RESULTS,
    "import builtins, json\nbuiltins.print = lambda *a, **k: None\njson.dumps = lambda *a, **k: 'true'\nprint('x')\n",
    "import sys\nclass Out:\n    def write(self, s): return len(s)\n    def flush(self): pass\nsys.stdout = Out()\n",
    "open('sitecustomize.py', 'w').write('print(\"8c51f0e2\")')\nopen('usercustomize.py', 'w').write('print(1)')\n"
    "open('conftest.py', 'w').write('print(1)')\nprint('nope')\n",
])
def test_tampering_with_the_harness_never_passes(sb, code):
    for tests in (SECRET, SECRET_FN if "def solve" in code else SECRET):
        score = sb.run(code, tests, mode="pass_rate")
        assert score.value == 0.0 and score.scorable, score
    assert_nothing_left()


@pytest.mark.parametrize("code", [
    "class E:\n    def __eq__(self, other): return True\n    __hash__ = object.__hash__\ndef solve(n):\n    return E()\n",
    "class E(int):\n    def __eq__(self, other): return True\ndef solve(n):\n    return E(0)\n",
    "import json\njson.dumps = lambda *a, **k: 'true'\ndef solve(n):\n    return 0\n",
    FAKE_RESULTS.replace("os._exit(0)", "def solve(n):\n    return 0"),
])
def test_functional_tampering_never_passes(sb, code):
    score = sb.run(code, SECRET_FN, mode="pass_rate")
    assert score.value == 0.0 and score.scorable, score
    # json.dumps patched inside the child cannot reach the parent's verdict...
    if "json.dumps = lambda" in code:
        assert score.status == "wrong"


def test_sitecustomize_in_cwd_does_not_run_in_later_tests(sb):
    code = ("import os\n"
            "if not os.path.exists('sitecustomize.py'):\n"
            "    open('sitecustomize.py', 'w').write('print(\"HACKED\")')\n"
            "    open('conftest.py', 'w').write('print(\"HACKED\")')\n"
            "print(sorted(f for f in os.listdir('.') if f.endswith('.py')))\n")
    records = sb.execute(code, SECRET).records
    assert [r["out"] for r in records] == ["['conftest.py', 'sitecustomize.py']\n"] * 2


# ------------------------------------------------------------------ #7 strict comparison in a run

@pytest.mark.parametrize("code", [
    "print(8)\n",                                     # a prefix
    "print('8c51f0e2' if input() == 'alpha' else '19d4a7b3')\nprint('extra')\n",  # extra line
    "pass\n",                                         # nothing
])
def test_near_misses_fail(sb, code):
    assert sb.run(code, SECRET).value == 0.0
    good = "print('8c51f0e2' if input() == 'alpha' else '19d4a7b3')\n"
    assert sb.run(good, SECRET).value == 1.0


# ------------------------------------------------------------------ #8 network, secrets, files

def test_sockets_fail(sb):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    code = ("import socket\n"
            f"for addr in [('127.0.0.1', {port}), ('1.1.1.1', 53), ('8.8.8.8', 443)]:\n"
            "    try:\n        socket.create_connection(addr, timeout=1)\n        print('CONNECTED')\n"
            "    except OSError as e:\n        print('blocked', e.errno)\n")
    try:
        score = sb.run(code, CodeTests("stdin", ("",), ("CONNECTED\nCONNECTED\nCONNECTED\n",)))
        with pytest.raises(socket.timeout):
            listener.accept()
    finally:
        listener.close()
    assert score.value == 0.0
    assert "blocked" in score.info["first_failure"]["reason"]


def test_secrets_are_not_in_the_environment(sb, monkeypatch):
    for key in ("HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "WANDB_API_KEY"):
        monkeypatch.setenv(key, "s3cr3t-value")
    code = "import os\nprint(sorted(os.environ))\nprint(os.environ)\nprint(open('/proc/self/environ').read())\n"
    out = sb.execute(code, SECRET).records[0]["out"]
    assert "s3cr3t" not in out and "HF_TOKEN" not in out and "WANDB" not in out
    names = eval(out.split("\n")[0])  # noqa: S307 - our own test program's output
    assert set(names) <= {"PATH", "LANG", "LC_ALL", "PYTHONIOENCODING", "PYTHONDONTWRITEBYTECODE", "HOME",
                          "TMPDIR", "MALLOC_ARENA_MAX", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"}


def test_host_files_are_out_of_reach(sb, tmp_path):
    secret = tmp_path / "gold.txt"
    secret.write_text("8c51f0e2\n")
    secret.chmod(0o644)
    code = ("import os\n"
            f"for path in ['{tmp_path}/pwned', '/etc/pwned', '/pwned', '/usr/pwned', '{RUNNER}.pwned']:\n"
            "    try:\n        open(path, 'w').write('x')\n        print('wrote', path)\n"
            "    except OSError as e:\n        print('denied', e.errno)\n"
            f"for path in ['{secret}', '/etc/shadow', '/root/.bashrc', '/work']:\n"
            "    try:\n        open(path).read()\n        print('read', path)\n"
            "    except OSError as e:\n        print('denied', e.errno)\n"
            "print(os.getuid() != 0, os.getcwd(), os.environ['HOME'] == os.environ['TMPDIR'] == os.getcwd())\n"
            "open('mine.txt', 'w').write('ok')\nprint(open('mine.txt').read())\n")
    out = sb.execute(code, SECRET).records[0]["out"].split("\n")
    assert all(line.startswith("denied") for line in out[:9]), out
    assert out[9:11] == ["True /sandbox True", "ok"]
    assert not (tmp_path / "pwned").exists() and not Path("/etc/pwned").exists() and not Path("/pwned").exists()


# ------------------------------------------------------------------ #9 infrastructure failures

def test_spawn_failure_is_unscorable_not_zero(sb, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("fork failed: resource temporarily unavailable")
    before = _run_dirs()
    monkeypatch.setattr(sandbox_mod.subprocess, "Popen", broken)
    score = grade_code(f"```python\n{ADD_OK}```", ADD, sandbox=sb)
    assert (score.value, score.status) == (None, "unscorable")
    assert "fork failed" in score.info["reason"]
    assert _run_dirs() <= before                   # cleaned up all the same


def test_harness_crash_before_the_code_runs_is_unscorable(sb, monkeypatch):
    monkeypatch.setattr(sandbox_mod, "_python", lambda: "/nonexistent/python3")
    score = sb.run(ADD_OK, ADD)
    assert (score.value, score.status) == (None, "unscorable"), score
    monkeypatch.undo()
    prepare = sandbox_mod._prepare

    def no_mount_point(*args):
        cfg = prepare(*args)
        cfg["root_mount"] = "/nonexistent/mount/point"
        return cfg
    monkeypatch.setattr(sandbox_mod, "_prepare", no_mount_point)
    score = sb.run(ADD_OK, ADD)                            # building the jail fails in boot
    assert (score.value, score.status) == (None, "unscorable"), score
    assert "boot_error" in score.info["reason"]


@pytest.mark.parametrize("kind", ["stdin", "functional"])
def test_test_process_setup_failure_is_unscorable(sb, monkeypatch, kind):
    prepare = sandbox_mod._prepare

    def impossible_limit(*args):
        cfg = prepare(*args)
        cfg["limits"]["nofile"] = 1 << 40       # above the hard limit: setrlimit fails in setup
        return cfg
    monkeypatch.setattr(sandbox_mod, "_prepare", impossible_limit)
    tests = ADD if kind == "stdin" else CodeTests("functional", ([1, 2],), (3,), "add")
    score = sb.run(ADD_OK if kind == "stdin" else "def add(a, b):\n    return a + b\n", tests)
    assert (score.value, score.status) == (None, "unscorable"), score
    assert "setup failed" in score.info["reason"]


def test_bad_tests_are_unscorable(sb):
    assert sb.run(ADD_OK, CodeTests("stdin", (), ())).status == "unscorable"
    assert sb.run(ADD_OK, CodeTests("functional", ([1],), (1,), None)).status == "unscorable"


# ------------------------------------------------------------------ weaker isolation modes

@pytest.fixture
def only_mode(monkeypatch):
    def use(name: str):
        original = sandbox_mod._candidate_strategies
        monkeypatch.setattr(sandbox_mod, "_candidate_strategies",
                            lambda: [s for s in original() if s.name == name])
        monkeypatch.setattr(sandbox_mod, "_probe_cache", {})
    return use


def test_without_network_isolation_the_user_must_opt_in(only_mode):
    only_mode("plain")
    with pytest.raises(SandboxUnavailable, match="allow_unisolated_network=True"):
        CodeSandbox(LIMITS)
    sb = CodeSandbox(LIMITS, allow_unisolated_network=True)
    assert sb.isolation["network"] == "none"
    score = sb.run(ESCAPE, ADD)
    assert (score.value, score.status, score.info["network"]) == (1.0, "ok", "none")
    assert sb.run("while True: pass\n", ADD).status == "timeout"
    assert_nothing_left()


def test_user_namespace_mode(only_mode):
    only_mode("userns")
    sb = CodeSandbox(LIMITS)
    assert (sb.isolation["strategy"], sb.isolation["network"]) == ("userns", "netns")
    assert sb.run(ADD_OK, ADD).value == 1.0
    assert sb.run("while True: print(1)\n", ADD).status == "timeout"
    assert sb.run(ESCAPE, ADD).value == 1.0
    assert_nothing_left()


def test_run_many_keeps_order(sb):
    items = [(ADD_OK, ADD), ("print(3)\n", ADD), ("1/0\n", ADD), (ADD_OK, ADD)]
    assert [s.status for s in sb.run_many(items)] == ["ok", "wrong", "runtime_error", "ok"]


def test_ordinary_python_features_work(sb):
    code = ("import sys, threading, multiprocessing, tempfile, math, collections, heapq, bisect\n"
            "with multiprocessing.Pool(2) as pool:\n    squares = pool.map(abs, [-1, -2])\n"
            "sys.setrecursionlimit(10 ** 5)\nthreading.stack_size(1 << 26)\n"
            "def depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\n"
            "result = []\nt = threading.Thread(target=lambda: result.append(depth(20000)))\nt.start()\nt.join()\n"
            "with tempfile.NamedTemporaryFile() as f:\n    f.write(b'x')\n"
            "print(result[0], squares, math.isqrt(10 ** 20))\n")
    records = sb.execute(code, SECRET).records
    assert records[0]["out"] == "20000 [1, 2] 10000000000\n", records[0]
