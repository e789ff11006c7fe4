"""scripts/gpu_check.sh --cpu: the GPU check's every stage, run end to end on the CPU.

The script makes its own venv over this interpreter's packages and installs rolecall into it
offline, so this also checks that the offline install works. On a GPU machine the same script
without --cpu is the check (docs/gpu_check.md)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_gpu_check_runs_every_stage_on_the_cpu(tmp_path):
    out = tmp_path / "check.json"
    env = {**os.environ, "PYTHON": sys.executable, "TMPDIR": str(tmp_path)}
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), "--cpu", "--out", str(out)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["failed"] == []
    assert doc["ran"] == ["environment", "pytest_gpu", "matmul", "make_model", "voting_qwen3-small-shape", "resume"]
    assert doc["mode"] == "cpu" and doc["versions"]["rolecall"]
    assert doc["stages"]["environment"]["install"] == "pip"  # rolecall really installed, offline
    assert doc["stages"]["pytest_gpu"]["counts"].get("skipped", 0) >= 1  # no CUDA here: the GPU tests skip
    voting = doc["stages"]["voting_qwen3-small-shape"]
    assert [s["step"] for s in voting["steps"]] == [1, 2]
    assert all(s["completion_tokens"] == s["turns"] * 16 for s in voting["steps"])  # ignore_eos: fixed work
    assert 0 < voting["mfu_vs_measured_matmul"] < 5 and voting["train_tflop_per_s"] > 0
    assert doc["stages"]["resume"]["step_rows"] == [1, 2, 3]
    assert doc["skipped"] == {"voting_smollm2": "no --smollm2 given"}


def test_gpu_check_refuses_a_gpu_run_without_cuda(tmp_path):
    import torch

    if torch.cuda.is_available():
        import pytest

        pytest.skip("this machine has CUDA")
    out = tmp_path / "check.json"
    env = {**os.environ, "PYTHON": sys.executable, "TMPDIR": str(tmp_path)}
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), "--out", str(out)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1
    doc = json.loads(out.read_text())
    assert "cuda" in doc["failed"] and "no CUDA device" in doc["stages"]["cuda"]["error"]


def test_gpu_check_rejects_unknown_arguments():
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), "--bogus"], capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown argument --bogus" in proc.stderr
