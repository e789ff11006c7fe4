"""Run fingerprint: what a run trains on, so a resume cannot silently switch it.

Every checkpoint stores the fingerprint of its run: model and tokenizer (content hashes),
the problems (a hash of their uids, prompts, answers), workflow, routing, LoRA shape and
reward. Resuming compares it field by field and refuses on any difference unless forced.
Fields such as `train.steps` or `train.val_every` are not in it: changing them is harmless.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from rolecall.errors import UserError
from rolecall.policies.model import resolve_model_dir
from rolecall.rewards.custom import module_source
from rolecall.rundir.init_from import adapter_digest, resolve_adapter
from rolecall.tasks import get_task

# Compared in this order; the first is what a user most likely changed by mistake.
FIELDS = ("model", "tokenizer", "dataset", "workflow", "routing", "lora", "reward", "credit")
# Shown in the message, never compared: a model or data file that moved is still the same one.
_INFO = {"path"}
_HEAD = 1 << 20  # bytes hashed at each end of a weights file: cheap even for many GB
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                    "vocab.json", "merges.txt", "tokenizer.model")


class ResumeRefused(UserError, ValueError):
    """The checkpoint was trained on something else than this config describes."""


def _sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()[:16]


def _json(v) -> str:
    return json.dumps(v, sort_keys=True, default=str)


def _weights_digest(model_dir: Path) -> str:
    """Size plus the first and last MiB of each weights file: any retrained or swapped file differs."""
    h = hashlib.sha256()
    for f in sorted(p for p in model_dir.iterdir() if p.suffix in (".safetensors", ".bin", ".pt", ".pth")):
        size = f.stat().st_size
        with open(f, "rb") as fh:
            head = fh.read(_HEAD)
            fh.seek(max(0, size - _HEAD))
            tail = fh.read(_HEAD)
        h.update(f"{f.name}:{size}:".encode() + head + tail)
    return h.hexdigest()[:16]


def model_fingerprint(cfg, path: str | None = None) -> dict:
    """A base model's identity (the run's, or the one at `path`): directory, config.json and weights, as hashes."""
    d = resolve_model_dir(path or cfg.model.path)
    return {"path": str(d.resolve()), "config.json": _sha((d / "config.json").read_bytes()),
            "weights": _weights_digest(d)}


def _model(cfg) -> dict:
    out = model_fingerprint(cfg)
    own = {name: pol.model for name, pol in sorted((cfg.policies or {}).items()) if pol.model}
    if own:  # policies on other bases: each one's weights, config and tokenizer
        out["policy_bases"] = {name: {**{k: v for k, v in model_fingerprint(cfg, path).items() if k != "path"},
                                      "tokenizer": _tokenizer_files(path)} for name, path in own.items()}
    return out


def _tokenizer_files(path: str) -> str:
    d = resolve_model_dir(path)
    return _sha(_json({f: _sha((d / f).read_bytes()) for f in _TOKENIZER_FILES if (d / f).is_file()}))


def _tokenizer(cfg, tok) -> dict:
    return {"files": _tokenizer_files(cfg.model.path), "chat_template": _sha(tok.chat_template or "")}


def _dataset(cfg, train_P, val_P) -> dict:
    if cfg.task.name == "dataset":
        d = cfg.data
        source = {"path": str(Path(d.path).resolve()), "val_path": d.val_path and str(Path(d.val_path).resolve())}
        task = f"dataset {d.format}"
    else:  # the task says what identifies its problems (arithmetic and multihop as before this was asked)
        identity = get_task(cfg.task.name).identity(cfg)
        source, task = {"path": identity["path"]}, identity["task"]
        if cfg.task.options:  # a task's own options (absent when none, so older fingerprints still match)
            source["options"] = cfg.task.options
    # A built-in corpus lives in a cache folder that may move; its file name carries its content hash.
    problems = _sha(_json([[p.uid, p.prompt, p.answer, _portable(p.meta)] for P in (train_P, val_P) for p in P]))
    return {**source, "task": task, "problems": problems, "train": len(train_P), "val": len(val_P)}


def _portable(meta: dict) -> dict:
    return {**meta, "corpus": Path(meta["corpus"]).name} if "corpus" in meta else meta


def _reward(cfg) -> dict:
    # What decides an episode's reward; verifier process counts and halting thresholds are not in it.
    r = cfg.reward_cfg()
    out = {k: getattr(r, k) for k in ("name", "format_penalty", "math_checker", "math_deadline_s",
                                       "code_mode", "code_timeout_s", "code_memory_mb", "qa_metric")}
    # Settings added later enter only when they differ from what older runs did, so those still resume.
    if r.answer_from != "boxed":
        out["answer_from"] = r.answer_from
    if r.name == "reasoning_gym":
        out["gym_deadline_s"] = r.gym_deadline_s
    if ":" in r.name:  # a user's function: its source file's contents decide the reward too

        source = module_source(r.name)
        out["source"] = _sha(Path(source).read_bytes()) if source and Path(source).is_file() else None
    return out


def _init(cfg) -> dict:
    """The weights each `init_from` policy starts from (absent when none does)."""

    init = {p: adapter_digest(resolve_adapter(p, path)) for p, path in cfg.policy_init().items()}
    return {"init_from": init} if init else {}


def run_fingerprint(cfg, stack) -> dict:
    """The fingerprint of the run `stack` was built for (hashes only: cheap for any model size)."""
    w, lora = cfg.workflow, cfg.lora
    return {
        "model": _model(cfg),
        "tokenizer": _tokenizer(cfg, stack.tok),
        "dataset": _dataset(cfg, stack.train_P, stack.val_P),
        # the prompts the built workflow holds (its facts as data: this layer names no workflow module)
        "workflow": {"workflow": w.name, "options": _json(w.options), "prompts": _sha(_json(stack.workflow.prompts))},
        "routing": {"routing": cfg.routing if isinstance(cfg.routing, str) else _json(cfg.routing),
                    "policies": _json(cfg.policy_table()), **_init(cfg)},
        "lora": {"r": lora.r, "alpha": lora.alpha, "target_modules": _json(lora.target_modules),
                 **({"policies": _json(cfg.policy_lora())} if cfg.policy_lora() else {})},
        "reward": _reward(cfg),
        # the estimator per role: switching a role to counterfactual credit mid-run changes what it learns from
        "credit": {"estimator": _json(cfg.algo.estimator)},
    }


def _show(field: str, value: dict, keys: list[str]) -> str:
    """The differing keys, and the path if there is one; a key named like its field shows bare."""
    shown = (["path"] if "path" in value else []) + keys
    return ", ".join(str(value.get(k)) if k in (field, "path") else f"{k}={value.get(k)}" for k in shown)


def differences(saved: dict, now: dict) -> list[str]:
    """One phrase per field that differs, e.g. `routing differs (checkpoint: isolated, now: shared)`."""
    out = []
    for field in FIELDS:
        if field not in saved:  # a checkpoint saved before rolecall recorded this field
            continue
        a, b = saved.get(field) or {}, now.get(field) or {}
        keys = [k for k in sorted(a.keys() | b.keys()) if k not in _INFO and a.get(k) != b.get(k)]
        if keys:
            out.append(f"{field} differs (checkpoint: {_show(field, a, keys)}, now: {_show(field, b, keys)})")
    return out


def check_resume(saved: dict | None, now: dict, *, force: bool) -> list[str]:
    """Refuse to resume onto a different model, tokenizer, data, workflow, routing, LoRA or reward.

    Returns the differences that `force` let through (empty when there are none).
    """
    diffs = ["the checkpoint has no fingerprint (saved by an older rolecall), so nothing can be checked"] \
        if saved is None else differences(saved, now)
    if diffs and not force:
        raise ResumeRefused(f"resume refused: {'; '.join(diffs)}; pass --force to resume anyway")
    return diffs
