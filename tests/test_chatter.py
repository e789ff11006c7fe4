"""`rolecall train` shows rolecall's output; the libraries' bars and warnings go to the run's library.log."""
from __future__ import annotations

import os
import subprocess
import sys
import warnings

from rolecall.library_logs import library_output_to


def _train(tiny_model_dir, out, *extra):
    return subprocess.run([sys.executable, "-m", "rolecall", "train", f"model.path={tiny_model_dir}",
                           "rollout.problems_per_step=2", "rollout.group_size=2", "task.n_val=4",
                           "rollout.max_new_tokens=4", "--steps", "1", "--out", str(out), *extra],
                          capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1", "CI": ""})


def test_library_chatter_goes_to_the_run_log(tiny_model_dir, tmp_path):
    quiet = _train(tiny_model_dir, tmp_path / "q")
    assert quiet.returncode == 0, quiet.stderr
    text = quiet.stdout + quiet.stderr
    assert "Loading weights" not in text and "Warning" not in text and "[transformers]" not in text
    assert "run directory:" in text
    assert (tmp_path / "q" / "library.log").is_file()  # what transformers and torch said (deprecations ...)

    loud = _train(tiny_model_dir, tmp_path / "v", "--verbose")
    assert loud.returncode == 0, loud.stderr
    assert "Loading weights" in loud.stderr or "Warning" in loud.stderr
    assert not (tmp_path / "v" / "library.log").exists()


def test_the_redirection_is_undone_after_the_block(tmp_path):
    import logging

    before = logging.getLogger("transformers").handlers[:]
    with library_output_to(tmp_path) as path:
        warnings.warn("inside", UserWarning)
        logging.getLogger("peft").warning("peft says hi")
    assert "inside" in path.read_text() and "peft says hi" in path.read_text()
    assert logging.getLogger("transformers").handlers == before
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn("outside", UserWarning)
    assert [str(w.message) for w in caught] == ["outside"] and "outside" not in path.read_text()
