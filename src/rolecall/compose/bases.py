"""The base models of a run: the run's `model`, and any other a policy names (`policies.<p>.model`).

Each base is loaded once with the LoRA adapters of the policies it serves, its own tokenizer
and chat template, and its own engine; `RoutedEngine` sends each request to the engine of its
policy's base. Roles routed to `base` (adapters off) run on the run's own model.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from rolecall.engines.hf import HFEngine
from rolecall.engines.routed import RoutedEngine
from rolecall.errors import UserError
from rolecall.policies.model import (adapter_params, attach_adapters, check_weights, load_model, load_tokenizer,
                                     resolve_model_dir)
from rolecall.policies.routing import Routing


class BaseModelError(UserError, ValueError):
    """A policy's base model cannot serve it; the message names the policy and its roles."""


@dataclass
class Base:
    path: str  # as configured (`embedded` or a directory)
    model: object
    tok: object
    engine: HFEngine
    adapters: tuple[str, ...]  # the policies it serves
    trainable: tuple[str, ...]


def policy_paths(cfg, routing: Routing) -> dict[str, str]:
    """Each adapter policy's base model path: its own `model`, else the run's."""
    own = {name: pol.model for name, pol in (cfg.policies or {}).items() if pol.model}
    return {p: own.get(p, cfg.model.path) for p in routing.adapters}


def base_paths(cfg, routing: Routing) -> dict[str, tuple[str, ...]]:
    """Every base model path the run needs, the run's own first: {path: the adapter policies it serves}."""
    paths = policy_paths(cfg, routing)
    order = [cfg.model.path] + sorted({p for p in paths.values() if p != cfg.model.path})
    return {path: tuple(p for p in routing.adapters if paths[p] == path) for path in order}


def build_bases(cfg, routing: Routing, default_tok, only: str | None = None) -> dict[str, Base]:
    """Every base the run needs (or just the one at path `only`), the run's own first, keyed by
    path; adapters attached, LoRA A seeded from `train.seed` in a fixed order (so a resume
    rebuilds the same starting point).
    A base that serves no adapter stays bare (roles routed to `base`; a trainer that trains no LLM policy)."""
    return {path: _load_base(cfg, routing, path, names, default_tok)
            for path, names in base_paths(cfg, routing).items() if only is None or path == only}


def check_bases(cfg, routing: Routing) -> dict[str, dict]:
    """What loading each base other than the run's own reads, checked without loading its weights:
    its directory, its weights files' headers, its tokenizer and chat template; {path: counts}."""
    found = {}
    for path, names in list(base_paths(cfg, routing).items())[1:]:
        what = _setting(names)
        with _naming(routing, names):
            load_tokenizer(path, what=what)  # in the order `_load_base` reads them
            found[path] = check_weights(resolve_model_dir(path, what), what)
    return found


def _setting(names: tuple[str, ...]) -> str:
    """The config setting that names a policy's own base model."""
    return f"policies.{names[0]}.model" if names else "policies.<policy>.model"


@contextlib.contextmanager
def _naming(routing: Routing, names: tuple[str, ...]):
    """A base that cannot serve its policies is named with them and their roles."""
    try:
        yield
    except (FileNotFoundError, ValueError) as e:
        roles = sorted(r for r, p in routing.routes.items() if p in names)
        raise BaseModelError(f"policies {list(names)} (roles {roles}): {e}") from None


def _load_base(cfg, routing: Routing, path: str, names: tuple[str, ...], default_tok) -> Base:
    m = cfg.model
    if path == m.path:
        tok = default_tok
        model = load_model(path, m.dtype, m.device)
    else:
        what = _setting(names)
        with _naming(routing, names):
            tok = load_tokenizer(path, what=what)
            model = load_model(path, m.dtype, m.device, what=what)  # its weights files checked first
    torch.manual_seed(cfg.train.seed)  # LoRA A init
    if names:  # (a run that needs an adapter and has none is refused by its trainer's config check)
        model = attach_adapters(model, list(names), r=cfg.lora.r, alpha=cfg.lora.alpha,
                                dropout=cfg.lora.dropout, target_modules=cfg.lora.target_modules,
                                overrides=cfg.policy_lora())
    for p in model.parameters():
        p.requires_grad_(False)
    engine = HFEngine(model, tok, max_batch=cfg.rollout.max_batch, enable_thinking=m.enable_thinking,
                      max_prompt_tokens=cfg.rollout.max_prompt_tokens, ignore_eos=cfg.rollout.ignore_eos)
    return Base(path, model, tok, engine, names, tuple(p for p in routing.trainable if p in names))


def team_engine(bases: dict[str, Base], main_path: str):
    """The engine over all bases: the run's own base's engine, routed per policy when there are more."""
    main = bases[main_path]
    by_policy = {p: b.engine for b in bases.values() if b is not main for p in b.adapters}
    return RoutedEngine(by_policy, main.engine) if by_policy else main.engine


def adapter_models(bases: dict[str, Base]) -> dict[str, object]:
    """The model each adapter lives in (several when policies sit on different bases)."""
    return {a: b.model for b in bases.values() for a in b.adapters}


def mark_trainable(base: Base) -> None:
    """Each trainable adapter's tensors require grad (and nothing else does)."""
    for name in base.trainable:
        for p in adapter_params(base.model, name).values():
            p.requires_grad_(True)
