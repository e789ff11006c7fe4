"""Nothing a custom reward starts outlives the run: helpers in the worker's group, helpers that
left it with setsid, and a daemon that forked twice all end when `rolecall train` exits."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes through /proc (Linux)")

MODULE = '''
import os, subprocess
from pathlib import Path

def reward(problem, answer):
    d = Path(os.environ["HELPER_DIR"])
    if not (d / "started").exists():
        (d / "started").touch()
        pids = [subprocess.Popen(["sleep", "300"]).pid,                              # in the worker's group
                subprocess.Popen(["sleep", "301"], start_new_session=True).pid]        # detached: its own session
        subprocess.run(["sh", "-c", f"setsid sleep 302 > /dev/null 2>&1 & echo $! >> {d}/pids"])  # orphaned at once
        if os.fork() == 0:  # a daemon: fork, new session, fork again, the middle one exits
            os.setsid()
            if os.fork() == 0:
                (d / "pids").open("a").write(f"{os.getpid()}\\n")
                os.execvp("sleep", ["sleep", "303"])
            os._exit(0)
        (d / "pids").open("a").write("".join(f"{p}\\n" for p in pids))
    return 1.0
'''


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_no_helper_a_reward_starts_outlives_rolecall_train(tiny_model_dir, tmp_path):
    (tmp_path / "spawning_reward.py").write_text(textwrap.dedent(MODULE))
    env = {**os.environ, "HELPER_DIR": str(tmp_path), "PYTHONPATH": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "rolecall", "train", f"model.path={tiny_model_dir}",
                           "reward.name=spawning_reward:reward", "rollout.problems_per_step=2", "rollout.group_size=2",
                           "task.n_val=2", "rollout.max_new_tokens=4", "--steps", "1", "--out", str(tmp_path / "r")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    for _ in range(100):  # the daemon's pid is written by the daemon itself
        pids = [int(x) for x in (tmp_path / "pids").read_text().split()] if (tmp_path / "pids").exists() else []
        if len(pids) == 4:
            break
        time.sleep(0.05)
    assert len(pids) == 4
    deadline = time.monotonic() + 10
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [p for p in pids if _alive(p)] == []
