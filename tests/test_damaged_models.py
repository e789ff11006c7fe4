"""A damaged model is one line naming the file, exit 2: in `train --dry-run` (the preflight reads
what training reads: tokenizer, chat template, every weights file's header) and in training
itself (the same checks run before `from_pretrained`), for a run's own base and every other one."""
from __future__ import annotations

import json
import re
import shutil
import struct
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gguf_tiny import write_tiny_gguf
from rolecall.cli import app
from rolecall.config import load_config
from rolecall.errors import UserError
from rolecall.policies.model import load_model, load_tokenizer
from rolecall.policies.weights_check import WeightsError, check_bin, check_gguf, check_model_dir, check_safetensors
from rolecall.train.stack import build_stack, preflight

TINY = ["rollout.problems_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=4", "task.n_val=4",
        "train.threads=1", "workflow.name=single"]


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _truncate(f: Path, by: int = 100) -> int:
    data = f.read_bytes()
    f.write_bytes(data[:len(data) - by])
    return len(data) - by


def _safetensors(path: Path, tensors: dict[str, tuple[str, list[int], int]], extra: bytes = b"") -> Path:
    """A safetensors file from {name: (dtype, shape, bytes)}: a header and zero data."""
    header, offset = {}, 0
    for name, (dtype, shape, n) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset) + extra)
    return path


@pytest.fixture(scope="module")
def broken(tiny_model_dir, tmp_path_factory):
    d = tmp_path_factory.mktemp("damaged-models")
    _copy(tiny_model_dir, d / "good")
    size = _truncate(_copy(tiny_model_dir, d / "truncated") / "model.safetensors")
    (_copy(tiny_model_dir, d / "empty") / "model.safetensors").write_bytes(b"")
    garbled = _copy(tiny_model_dir, d / "garbled") / "model.safetensors"
    garbled.write_bytes(struct.pack("<Q", 20) + b"{not json at all!!!}")
    only = d / "only_config"
    only.mkdir()
    shutil.copy(tiny_model_dir / "config.json", only)
    _copy(tiny_model_dir, d / "bad_template")
    (d / "bad.jinja").write_text("{% for m in messages %}{{ m['content'] }")
    no_weights = _copy(tiny_model_dir, d / "no_weights")
    (no_weights / "model.safetensors").unlink()
    g = write_tiny_gguf(d / "tiny.gguf")
    (d / "empty.gguf").write_bytes(b"")
    data = g.read_bytes()
    (d / "truncated.gguf").write_bytes(data[:len(data) - 1000])
    return {"dir": d, "truncated_size": size}


def _cases(d: Path) -> dict[str, tuple[list[str], list[str]]]:
    """{case: (overrides, fragments the one-line message holds)}."""
    return {
        "truncated safetensors": ([f"model.path={d / 'truncated'}"], [str(d / "truncated" / "model.safetensors"),
                                                                     "truncated: tensor", "but the file has"]),
        "empty safetensors": ([f"model.path={d / 'empty'}"], [str(d / "empty" / "model.safetensors"), "empty"]),
        "garbled safetensors header": ([f"model.path={d / 'garbled'}"], ["model.safetensors", "not valid JSON"]),
        "no weights file": ([f"model.path={d / 'no_weights'}"], ["no weights file", "model.safetensors"]),
        "only config.json": ([f"model.path={d / 'only_config'}"], ["no tokenizer files", "tokenizer.json"]),
        "chat template does not render": ([f"model.path={d / 'bad_template'}",
                                           f"model.chat_template={d / 'bad.jinja'}"], ["bad.jinja", "does not render"]),
        "missing gguf": ([f"model.path={d / 'missing.gguf'}"], ["model.path", "missing.gguf' does not exist"]),
        "empty gguf": ([f"model.path={d / 'empty.gguf'}"], [str(d / "empty.gguf"), "empty"]),
        "truncated gguf": ([f"model.path={d / 'truncated.gguf'}"],
                           [str(d / "truncated.gguf"), "truncated: tensor", "but the file has"]),
        "a policy's own base truncated": ([f"model.path={d / 'good'}", f"policies.generator.model={d / 'truncated'}"],
                                          ["policies ['generator']", "policies.generator.model",
                                           str(d / "truncated" / "model.safetensors"), "truncated"]),
        "a policy's own base has no tokenizer": ([f"model.path={d / 'good'}",
                                                  f"policies.generator.model={d / 'only_config'}"],
                                                 ["policies ['generator']", "no tokenizer files"]),
    }


CASES = list(_cases(Path("/d")))


def _error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, output
    return lines[0]


@pytest.mark.parametrize("case", CASES)
def test_dry_run_refuses_a_damaged_model_in_one_line(broken, case, monkeypatch, tmp_path):
    monkeypatch.setenv("ROLECALL_MODELS", str(tmp_path / "models"))
    overrides, fragments = _cases(broken["dir"])[case]
    res = CliRunner().invoke(app, ["train", *overrides, *TINY, "--dry-run"])
    assert res.exit_code == 2 and isinstance(res.exception, SystemExit), (res.output, res.exception)
    assert "Traceback" not in res.output and "preflight ok" not in res.output, res.output
    line = _error_line(res.output)
    assert all(f in line for f in fragments), line


@pytest.mark.parametrize("case", CASES)
def test_training_refuses_a_damaged_model_before_loading_it(broken, case, monkeypatch, tmp_path):
    """`build_stack` (what every run builds) stops with the same kind of error, before any library reads the file."""
    monkeypatch.setenv("ROLECALL_MODELS", str(tmp_path / "models"))
    overrides, fragments = _cases(broken["dir"])[case]
    with pytest.raises((UserError, OSError, ValueError)) as e:
        build_stack(load_config(None, [*overrides, *TINY]))
    message = " ".join(str(e.value).split())
    assert all(f in message for f in fragments), message
    assert "SafetensorError" not in type(e.value).__name__


def test_training_run_on_a_truncated_model_is_one_line(broken, tmp_path):
    res = CliRunner().invoke(app, ["train", f"model.path={broken['dir'] / 'truncated'}", *TINY, "train.steps=1",
                                   "--out", str(tmp_path / "run")])
    assert res.exit_code == 2, (res.output, res.exception)
    assert "Traceback" not in res.output
    assert f"but the file has {broken['truncated_size']} bytes" in _error_line(res.output)


def test_a_sound_model_passes_and_preflight_says_what_it_checked(tiny_model_dir, tmp_path):
    info = preflight(load_config(None, [f"model.path={tiny_model_dir}", *TINY]))
    assert info["weights"]["files"] == 1 and info["weights"]["tensors"] > 0
    two = preflight(load_config(None, [f"model.path={tiny_model_dir}", *TINY,
                                       f"policies.generator.model={_copy(tiny_model_dir, tmp_path / 'other')}"]))
    assert list(two["other_bases"]) == [str(tmp_path / "other")]


def test_load_model_and_tokenizer_name_the_file(broken):
    d = broken["dir"]
    with pytest.raises(WeightsError, match=r"model\.path: .*truncated/model\.safetensors: truncated"):
        load_model(str(d / "truncated"))
    with pytest.raises(UserError, match="no tokenizer files"):
        load_tokenizer(str(d / "only_config"))
    with pytest.raises(WeightsError, match=r"truncated\.gguf: truncated"):
        load_model(str(d / "truncated.gguf"))


def test_safetensors_header_checks(tmp_path):
    good = _safetensors(tmp_path / "good.safetensors", {"a": ("F32", [2, 3], 24), "b": ("BF16", [4], 8)})
    assert set(check_safetensors(good)) == {"a", "b"}
    with pytest.raises(WeightsError, match="do not fit its F32 shape"):
        check_safetensors(_safetensors(tmp_path / "shape.safetensors", {"a": ("F32", [2, 3], 20)}))
    with pytest.raises(WeightsError, match="tensors end at byte .* but the file has"):
        check_safetensors(_safetensors(tmp_path / "long.safetensors", {"a": ("F32", [1], 4)}, extra=b"xx"))
    short = tmp_path / "short.safetensors"
    short.write_bytes(b"\x10\x00")
    with pytest.raises(WeightsError, match="not even the 8-byte header length"):
        check_safetensors(short)
    huge = tmp_path / "header.safetensors"
    huge.write_bytes(struct.pack("<Q", 1000) + b"{}")
    with pytest.raises(WeightsError, match="the header ends at byte 1008 but the file has 10 bytes"):
        check_safetensors(huge)


def test_sharded_checkpoints_check_every_shard(tmp_path):
    d = tmp_path / "sharded"
    d.mkdir()
    _safetensors(d / "s1.safetensors", {"a": ("F32", [2], 8)})
    _safetensors(d / "s2.safetensors", {"b": ("F32", [2], 8)})
    index = d / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}}))
    assert check_model_dir(d) == {"files": 2, "tensors": 2}
    index.write_text(json.dumps({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors", "c": "s2.safetensors"}}))
    with pytest.raises(WeightsError, match=r"s2\.safetensors: lacks 1 tensors .* \(e\.g\. 'c'\)"):
        check_model_dir(d)
    index.write_text(json.dumps({"weight_map": {"a": "s1.safetensors", "b": "s3.safetensors"}}))
    with pytest.raises(WeightsError, match=r"s3\.safetensors: missing \(a shard"):
        check_model_dir(d)
    _truncate(d / "s1.safetensors", 4)
    index.write_text(json.dumps({"weight_map": {"a": "s1.safetensors"}}))
    with pytest.raises(WeightsError, match=r"s1\.safetensors: truncated: tensor 'a' ends at byte"):
        check_model_dir(d)
    index.write_text("{}")
    with pytest.raises(WeightsError, match="not a weights index"):
        check_model_dir(d)


def test_pytorch_bin_files_exist_are_not_empty_and_zips_are_whole(tmp_path):
    import torch

    d = tmp_path / "bin"
    d.mkdir()
    torch.save({"a": torch.zeros(64)}, d / "pytorch_model.bin")
    assert check_model_dir(d)["files"] == 1
    _truncate(d / "pytorch_model.bin", 30)
    with pytest.raises(WeightsError, match="pytorch_model.bin: truncated or damaged"):
        check_bin(d / "pytorch_model.bin")
    (d / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(WeightsError, match=r"pytorch_model\.bin: empty"):
        check_model_dir(d)
    (d / "pytorch_model.bin").unlink()
    (d / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": {"a": "part-1.bin"}}))
    with pytest.raises(WeightsError, match=r"part-1\.bin: missing"):
        check_model_dir(d)


def test_gguf_header_checks(tmp_path):
    g = write_tiny_gguf(tmp_path / "tiny.gguf")
    assert check_gguf(g) == 20
    data = g.read_bytes()
    for n, fragment in [(2, "not even the GGUF magic"), (40, "its header runs past the end of the file (40 bytes)"),
                        (len(data) - 1, f"ends at byte {len(data)} but the file has {len(data) - 1} bytes")]:
        cut = tmp_path / f"cut{n}.gguf"
        cut.write_bytes(data[:n])
        with pytest.raises(WeightsError, match=re.escape(f"{cut}: ")) as e:
            check_gguf(cut)
        assert fragment in str(e.value), str(e.value)
    other = tmp_path / "other.gguf"
    other.write_bytes(b"PK\x03\x04" + data[4:])
    with pytest.raises(WeightsError, match="not a GGUF file"):
        check_gguf(other)
    v1 = tmp_path / "v1.gguf"
    v1.write_bytes(data[:4] + struct.pack("<I", 1) + data[8:])
    with pytest.raises(WeightsError, match="GGUF version 1"):
        check_gguf(v1)

