"""benchmarks/real_profile.py at smoke size on the embedded model: every phase of a step is named
and timed, the phases add up to the step, matmul work is counted where model forwards ran, and
the instrumentation is undone."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_profile_names_every_phase_and_they_add_up_to_the_step(tmp_path):
    out = tmp_path / "profile.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks", "real_profile", "--config", "embedded", "--prompts", "2",
                           "--samples", "2", "--tokens", "4", "--threads", "1", "--dtype", "float32", "--label", "smoke",
                           "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    entry = json.loads(out.read_text())["entries"]["smoke"]
    phases = entry["phases"]
    for name in ("prefill", "decode", "update forward", "backward", "update no-grad pass", "optimizer (clip and step)"):
        assert phases[name]["wall_s"] > 0, name
    for name in ("prefill", "decode", "update forward", "backward"):
        assert phases[name]["matmul_gflop"] > 0 and 0 < phases[name]["of_fp32_matmul_rate"], name
    assert abs(sum(p["share"] for p in phases.values()) - 1) < 0.01
    # the timed step's phases are the step; the profiled step only splits them into ops
    assert sum(p["wall_s"] for p in phases.values()) <= entry["step_s"] * 1.05 + 0.05
    assert set(phases["update forward"]["ops_s"]) >= {"matmul"}
    assert entry["dtype"] == "float32" and entry["matmul_gflops_per_s"]["float32"] > 0
    assert entry["work"] == {"prompts": 2, "samples": 2, "max_new_tokens": 4, "ignore_eos": True, "threads": 1}
