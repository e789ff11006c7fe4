"""`rolecall cut-model`: a smaller base from a bigger one (its first N layers), loadable as a
policy's own base; bad layer counts and a folder of the user's files are refused."""
from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from rolecall.cli import app
from rolecall.errors import UserError
from rolecall.policies.cut import cut_model
from rolecall.policies.model import load_model, load_tokenizer


def test_the_cut_model_keeps_the_first_layers_and_loads_as_a_base(tiny_model_dir, tmp_path):
    out = tmp_path / "cut"
    kept = cut_model(str(tiny_model_dir), 1, out)
    assert kept["layers"] == "1 of 2" and json.loads((out / "rolecall_cut.json").read_text())["layers"] == "1 of 2"
    whole, cut = load_model(str(tiny_model_dir)), load_model(str(out))
    assert cut.config.num_hidden_layers == 1 and kept["params"] == sum(p.numel() for p in cut.parameters())
    assert kept["params"] < sum(p.numel() for p in whole.parameters())
    # the kept layer is the first one, bit for bit, and the tokenizer is the source's
    assert torch.equal(cut.model.layers[0].mlp.up_proj.weight, whole.model.layers[0].mlp.up_proj.weight)
    assert load_tokenizer(str(out)).get_vocab() == load_tokenizer(str(tiny_model_dir)).get_vocab()
    ids = torch.tensor([[5, 6, 7]])
    assert cut(input_ids=ids).logits.shape == whole(input_ids=ids).logits.shape
    cut_model(str(tiny_model_dir), 1, out)  # a folder it wrote may be written again


@pytest.mark.parametrize("layers", [0, 2, 5])
def test_a_layer_count_that_cuts_nothing_or_everything_is_refused(tiny_model_dir, tmp_path, layers):
    with pytest.raises(UserError, match="--layers must be from 1 to 1"):
        cut_model(str(tiny_model_dir), layers, tmp_path / "cut")
    assert not (tmp_path / "cut").exists()


def test_a_folder_of_the_users_files_is_refused(tiny_model_dir, tmp_path):
    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(UserError, match="not empty"):
        cut_model(str(tiny_model_dir), 1, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]


def test_the_command_cuts_and_says_what_it_kept(tiny_model_dir, tmp_path):
    res = CliRunner().invoke(app, ["cut-model", str(tiny_model_dir), "--layers", "1", "--out", str(tmp_path / "c")])
    assert res.exit_code == 0, res.output
    assert "1 of 2" in res.output and (tmp_path / "c" / "model.safetensors").is_file()
