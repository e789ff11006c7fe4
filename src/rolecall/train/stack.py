"""What one run holds in memory (`Stack`), built from the composition root's parts."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from rolecall.algo.optim import PolicyOptim, build_optimizers
from rolecall.compose.bases import Base, adapter_models, check_bases, mark_trainable, team_engine
from rolecall.compose.parts import build_parts
from rolecall.distributed.data_parallel import DataParallel
from rolecall.engines.hf import HFEngine
from rolecall.engines.routed import RoutedEngine
from rolecall.errors import UserError
from rolecall.rundir.init_from import check_adapter, load_init, resolve_adapter
from rolecall.train.memory import bound_heap
from rolecall.policies.model import check_weights, resolve_model_dir
from rolecall.policies.routing import Routing
from rolecall.rewards.verifier import Verifier
from rolecall.rundir.fingerprint import model_fingerprint
from rolecall.schema import Config
from rolecall.types import Problem
from rolecall.workflows import Workflow


@dataclass
class Stack:
    """Everything one run holds in memory."""

    cfg: Config
    workflow: Workflow
    routing: Routing
    model: object
    tok: object
    engine: HFEngine | RoutedEngine
    optims: dict[str, PolicyOptim]
    train_P: list[Problem]
    val_P: list[Problem]
    verifier: Verifier
    bases: dict[str, Base] = field(default_factory=dict)  # every base model by path, the run's own first
    actors: object | None = None  # RayRollout when rollout.actors > 0
    dp: DataParallel | None = None  # the process group of a data-parallel run (torchrun)

    def close(self) -> None:
        """Stop the verifier's processes and the rollout actors."""
        try:
            self.verifier.close()
        finally:
            if self.actors is not None:
                self.actors.close()

    def models_by_adapter(self) -> dict[str, object]:
        """The model each adapter lives in (several when policies sit on different bases)."""
        return adapter_models(self.bases)

    def max_new_tokens(self, role: str) -> int:
        return self.cfg.rollout.max_new_tokens_by_role.get(role, self.cfg.rollout.max_new_tokens)


def build_stack(cfg: Config) -> Stack:
    """Everything a run holds, from the composition root's parts."""
    bound_heap()  # before the model and the engine allocate (train.memory)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    parts = build_parts(cfg)
    tok = parts.tokenizer()
    train_P, val_P = parts.problems(tok)
    verifier = parts.verifier()  # before the model: a sandbox that cannot isolate fails fast
    try:
        return _build_rest(cfg, parts, tok, train_P, val_P, verifier)
    except BaseException:  # a damaged model (or anything else) stops the build: no grading processes left
        verifier.close()
        raise


def _build_rest(cfg: Config, parts, tok, train_P: list[Problem], val_P: list[Problem], verifier: Verifier) -> Stack:
    bases = parts.bases(tok)
    optims: dict[str, PolicyOptim] = {}
    for base in bases.values():
        start_from_adapters(cfg, base)
        mark_trainable(base)  # each optimizer owns exactly its adapter's tensors
        optims.update(build_optimizers(base.model, base.trainable, cfg.optim, cfg.policy_optim()))
    main = bases[cfg.model.path]
    engine = team_engine(bases, cfg.model.path)
    if cfg.rollout.engine == "vllm":
        engine = vllm_engine(cfg, parts.routing, tok, bases)
    actors = None
    if cfg.rollout.actors:
        from rolecall.distributed.ray_rollout import RayRollout  # Ray loads only for runs that use it

        actors = RayRollout(cfg.model_dump(mode="json"), cfg.rollout.actors, address=cfg.rollout.ray_address,
                            gpus=cfg.rollout.actor_gpus)
    return Stack(cfg, parts.workflow, parts.routing, main.model, tok, engine, optims, train_P, val_P, verifier, bases,
                 actors, DataParallel.current())


def vllm_engine(cfg: Config, routing: Routing, tok, bases: dict[str, Base]):
    """The vLLM engine for a single-base run (the HF model stays for training)."""
    from rolecall.engines.vllm import VLLMEngine  # vLLM is an optional extra, in its own venv

    if len(bases) > 1:
        raise UserError("rollout.engine=vllm serves one base model; this run's policies sit on "
                        f"{len(bases)} ({sorted(bases)})")
    ranks = [cfg.lora_of(p).r for p in routing.adapters] or [cfg.lora.r]
    return VLLMEngine(resolve_model_dir(cfg.model.path), tok, adapters=routing.adapters, max_lora_rank=max(ranks),
                      memory_fraction=cfg.rollout.vllm_memory_fraction, enable_thinking=cfg.model.enable_thinking,
                      seed=cfg.train.seed, ignore_eos=cfg.rollout.ignore_eos)


def start_from_adapters(cfg: Config, base: Base) -> dict[str, Path]:
    """Load each `init_from` adapter of `base`'s policies (before optimizers exist); {policy: adapter dir}."""
    found = {}
    for policy, path in cfg.policy_init().items():
        if policy not in base.adapters:
            continue
        adapter = resolve_adapter(policy, path)
        check_adapter(policy, adapter, cfg.lora_of(policy), model_fingerprint(cfg, base.path))
        load_init(base.model, policy, adapter)
        found[policy] = adapter
    return found


def preflight(cfg: Config) -> dict[str, object]:
    """Check every input a run needs without loading weights: what loading each base model reads
    (its directory, the headers of its weights files, its tokenizer, and one message rendered
    through its chat template), every dataset row, and that the verifier can start (e.g. the
    code sandbox can isolate). Raises with the field at fault; returns a short summary."""
    parts = build_parts(cfg)
    model_dir = resolve_model_dir(cfg.model.path)
    tok = parts.tokenizer()  # in the order training loads them: tokenizer, then weights
    weights = check_weights(model_dir)
    others = check_bases(cfg, parts.routing)  # a heterogeneous run's other base models, checked alike
    lines: list[str] = []
    train_P, val_P = parts.problems(tok, log=lines.append)
    verifier = parts.verifier()
    try:
        isolation = getattr(getattr(verifier, "sandbox", None), "isolation", None)
    finally:
        verifier.close()
    return {"model": str(model_dir), "weights": weights, **({"other_bases": others} if others else {}),
            "train_problems": len(train_P), "val_problems": len(val_P), "data_report": lines,
            "verifier": cfg.reward.name, **({"sandbox": isolation} if isolation else {})}
