"""Training runs on one machine split its cores: each auto-threaded run takes cores / runs."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from rolecall.rundir.cpu_share import CpuShare, cpu_share_or_none

CHILD = """
import sys, time
from rolecall.rundir.cpu_share import CpuShare
share = CpuShare(sys.argv[1])
print("registered", flush=True)
time.sleep(120)
"""


def _other_run(directory) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(directory)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "registered"
    return p


def test_runs_split_the_cores_and_a_killed_run_gives_its_share_back(tmp_path, monkeypatch):
    before = torch.get_num_threads()
    share = CpuShare(tmp_path)
    monkeypatch.setattr(share, "cores", 4)  # as on a 4-core machine, whatever this one has
    other = _other_run(tmp_path)
    try:
        assert share.running() == 2
        assert share.apply() == 2 and torch.get_num_threads() == 2
        third = _other_run(tmp_path)
        assert share.apply() == 1  # 4 cores / 3 runs
        third.send_signal(signal.SIGKILL)  # a run killed -9 leaves its file; its lock is gone
        third.wait()
        assert share.apply() == 2 and sorted(p.name for p in tmp_path.iterdir()) == sorted(
            [str(os.getpid()), str(other.pid)])  # the dead run's file was removed
    finally:
        other.kill()
        other.wait()
        torch.set_num_threads(before)
    assert share.apply() == 4
    share.close()
    assert not list(tmp_path.iterdir())
    torch.set_num_threads(before)


def test_a_run_with_its_own_thread_count_does_not_register(tmp_path, monkeypatch):
    monkeypatch.setenv("ROLECALL_CPU_SHARE_DIR", str(tmp_path))
    assert cpu_share_or_none(3) is None
    share = cpu_share_or_none(0)
    try:
        assert share is not None and share.path.parent == tmp_path and share.running() == 1
    finally:
        share.close()


def test_an_unwritable_share_folder_leaves_the_default(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("ROLECALL_CPU_SHARE_DIR", str(blocker / "sub"))  # under a file: cannot be made
    assert cpu_share_or_none(0) is None
