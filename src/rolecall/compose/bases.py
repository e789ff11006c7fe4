"""The base models of a run: the run's `model`, and any other a policy names (`policies.<p>.model`).

Each base is loaded once with the LoRA adapters of the policies it serves, its own tokenizer
and chat template, and its own engine; `RoutedEngine` sends each request to the engine of its
policy's base. Roles routed to `base` (adapters off) run on the run's own model.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from rolecall.engines.hf import HFEngine
from rolecall.engines.routed import RoutedEngine
from rolecall.errors import UserError
from rolecall.policies.model import adapter_params, attach_adapters, load_model, load_tokenizer, resolve_model_dir
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


def build_bases(cfg, routing: Routing, default_tok, only: str | None = None) -> dict[str, Base]:
    """Every base the run needs (or just the one at path `only`), the run's own first, keyed by
    path; adapters attached, LoRA A seeded from `train.seed` in a fixed order (so a resume
    rebuilds the same starting point).
    A base that serves no adapter stays bare (roles routed to `base`; a trainer that trains no LLM policy)."""
    paths = policy_paths(cfg, routing)
    order = [cfg.model.path] + sorted({p for p in paths.values() if p != cfg.model.path})
    return {path: _load_base(cfg, routing, path, tuple(p for p in routing.adapters if paths[p] == path), default_tok)
            for path in order if only is None or path == only}


def _load_base(cfg, routing: Routing, path: str, names: tuple[str, ...], default_tok) -> Base:
    m = cfg.model
    roles = sorted(r for r, p in routing.routes.items() if p in names)
    if path == m.path:
        tok = default_tok
    else:
        try:
            resolve_model_dir(path)
            tok = load_tokenizer(path)
        except (FileNotFoundError, ValueError) as e:
            raise BaseModelError(f"policies {list(names)} (roles {roles}): model {path!r}: {e}") from None
    model = load_model(path, m.dtype, m.device)
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
