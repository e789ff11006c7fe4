"""benchmarks/deliberation.py: the trained policy paired with each arm by seed; and a benchmark
never removes a folder it did not write (`learning.clear_own`, used by deliberation.py)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.deliberation import (  # noqa: E402
    PLOT, RESULT, SEED_RECORD, check_kept, keep_from, outputs, paired_with_trained, run_seeds, summary)
from benchmarks.children import clear_own  # noqa: E402


def _run(**acc):
    return {"validation": {k: {"accuracy": v} for k, v in acc.items()}}


def test_trained_is_paired_with_each_arm_by_seed():
    runs = [_run(trained=0.6, persist=0.5, sft=0.6), _run(trained=0.7, persist=0.5, sft=0.65)]
    out = paired_with_trained(runs)
    assert set(out) == {"persist", "sft"}
    assert out["persist"]["values"] == [0.1, 0.2] and out["persist"]["mean"] == pytest.approx(0.15)
    lo, hi = out["persist"]["ci95"]
    assert lo < 0.15 < hi
    assert paired_with_trained(runs[:1])["sft"]["ci95"] is None  # one seed: no interval


def test_a_folder_that_is_not_a_run_is_refused(tmp_path):
    mine = tmp_path / "seed0"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(SystemExit, match="was not written by this benchmark"):
        clear_own(mine, "rolecall-run.json")
    assert (mine / "notes.txt").read_text() == "keep me"
    old = tmp_path / "seed1"
    old.mkdir()
    (old / "rolecall-run.json").write_text("{}")
    clear_own(old, "rolecall-run.json")
    assert not old.exists()
    clear_own(tmp_path / "absent", "rolecall-run.json")  # nothing to clear


def test_another_config_never_overwrites_the_example_record(tmp_path):
    from benchmarks.children import CONFIGS
    assert outputs(CONFIGS / "deliberation.yaml", None, None) == (RESULT, PLOT)
    result, plot = outputs(Path("configs/real/smollm2-deliberation.yaml"), None, None)
    assert result.name == "deliberation_smollm2-deliberation.json" and result.parent == RESULT.parent
    assert plot.name == "deliberation_smollm2-deliberation_actions.svg"
    assert outputs(Path("x.yaml"), tmp_path / "r.json", None)[0] == tmp_path / "r.json"


def test_resume_keeps_each_finished_seed_and_reruns_the_rest(tmp_path):
    calls = []

    def fake(seed, out, resumed):
        calls.append(seed)
        assert not resumed
        out.mkdir(parents=True)
        (out / "rolecall-run.json").write_text("{}")
        return {"seed": seed, "wall_s": 1.0, **_run(trained=0.5 + seed / 10)}

    made_by = {"config": "/x/real.yaml", "model": None}
    first = run_seeds([0, 1], tmp_path, made_by, False, fake)
    assert calls == [0, 1] and (tmp_path / "seed0" / SEED_RECORD).is_file()
    calls.clear()
    again = run_seeds([0, 1, 2], tmp_path, made_by, True, fake)
    assert calls == [2] and again[:2] == first  # seeds 0 and 1 read back, seed 2 run
    calls.clear()
    run_seeds([0], tmp_path, {**made_by, "config": "/x/other.yaml"}, True, fake)
    assert calls == [0]  # another config's record is not this one's: rerun
    calls.clear()
    (tmp_path / "seed1" / SEED_RECORD).unlink()  # a seed stopped midway leaves no record...
    (tmp_path / "seed1.started.json").unlink()  # ...and one never started by this benchmark: a fresh run
    run_seeds([1], tmp_path, made_by, True, fake)
    assert calls == [1]
    calls.clear()
    run_seeds([2], tmp_path, made_by, False, fake)
    assert calls == [2]  # without --resume every seed runs again


def test_resume_reruns_a_seed_whose_record_was_cut_short(tmp_path):
    calls = []

    def fake(seed, out):
        calls.append(seed)
        return {"seed": seed, "wall_s": 1.0, **_run(trained=0.5)}

    (tmp_path / "seed0").mkdir()
    (tmp_path / "seed0" / "rolecall-run.json").write_text("{}")
    (tmp_path / "seed0" / SEED_RECORD).write_text('{"made_by": {"config"')  # a write that never finished
    run_seeds([0], tmp_path, {"config": "/x/real.yaml", "model": None}, True,
              lambda seed, out, resumed: (out.mkdir(parents=True), fake(seed, out))[1])
    assert calls == [0]


def test_resume_continues_a_seed_this_benchmark_stopped_midway_and_no_other(tmp_path):
    made_by = {"config": "/x/real.yaml", "model": None}
    calls = []

    def stopped(seed, out, resumed):  # the machine goes down mid-run: the run folder stays, no record
        out.mkdir(parents=True, exist_ok=True)
        (out / "rolecall-run.json").write_text("{}")
        (out / "corpus.json").write_text("[]")  # a finished stage, worth keeping
        raise KeyboardInterrupt

    def finish(seed, out, resumed):
        calls.append((seed, resumed, (out / "corpus.json").is_file()))
        return {"seed": seed, "wall_s": 1.0, **_run(trained=0.5)}

    with pytest.raises(KeyboardInterrupt):
        run_seeds([0], tmp_path, made_by, True, stopped)
    run_seeds([0], tmp_path, made_by, True, finish)
    assert calls == [(0, True, True)]  # continued in place, its stages kept
    assert (tmp_path / "seed0" / SEED_RECORD).is_file()
    calls.clear()
    (tmp_path / "seed0" / SEED_RECORD).unlink()
    run_seeds([0], tmp_path, {**made_by, "model": "/other"}, True,
              lambda seed, out, resumed: (out.mkdir(parents=True), finish(seed, out, resumed))[1])
    assert calls == [(0, False, False)]  # started for another model: cleared and run afresh
    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        run_seeds([1], tmp_path, made_by, True, stopped)
    run_seeds([1], tmp_path, made_by, False,
              lambda seed, out, resumed: (out.mkdir(parents=True), finish(seed, out, resumed))[1])
    assert calls == [(1, False, False)]  # without --resume a stopped seed runs again from nothing


def test_a_lost_seed_folder_is_kept_from_the_earlier_record():
    """Seed 1 runs today; seeds 0 and 2 come from the committed record (their folders gone), each
    marked with where it was first recorded; the means and pairs are over all three."""
    old = [{"seed": s, "wall_s": 1.0, **_run(trained=0.5 + s / 10, persist=0.4, sft=0.4, refine=0.3)} for s in (0, 1, 2)]
    earlier = {**summary(old, "configs/real/x.yaml"),
               "provenance": {"commit": "abc", "dirty": False, "date": "2026-12-01", "versions": {"transformers": "5.24.0"},
                              "model_sha256": "f" * 64, "machine": {"cores": 2}}}
    earlier["runs"][2] = {**earlier["runs"][2], "kept_from": {"result": "first.json", "commit": "0ld"}}
    today = [{"seed": 1, "wall_s": 2.0, **_run(trained=0.9, persist=0.4, sft=0.4, refine=0.3)}]
    runs = keep_from(today, earlier, "old.json")
    assert [r["seed"] for r in runs] == [0, 1, 2] and runs[1] == today[0]  # today's seed 1 replaces the old one
    assert runs[0]["kept_from"] == {"result": "old.json", "commit": "abc", "dirty": False, "date": "2026-12-01",
                                    "versions": {"transformers": "5.24.0"}, "model_sha256": "f" * 64}
    assert runs[2]["kept_from"] == {"result": "first.json", "commit": "0ld"}  # kept twice: still its first origin
    doc = summary(runs, "configs/real/x.yaml")
    assert doc["mean_accuracy"]["trained"] == pytest.approx((0.5 + 0.9 + 0.7) / 3)
    assert doc["trained_minus"]["persist"]["values"] == pytest.approx([0.1, 0.5, 0.3])
    check_kept(earlier, "old.json", "configs/real/x.yaml", "f" * 64)  # same config and weights: fine
    with pytest.raises(SystemExit, match="records 'configs/real/x.yaml', not 'configs/real/y.yaml'"):
        check_kept(earlier, "old.json", "configs/real/y.yaml", "f" * 64)
    with pytest.raises(SystemExit, match="its runs used weights ffffffffffffffff…, these are 0000"):
        check_kept(earlier, "old.json", "configs/real/x.yaml", "0" * 64)
