"""Supervised warm start: each policy's LoRA fitted to its roles' demonstrations before RL.

An RL reward teaches only what a policy already does now and then. A small model can lack
the skill a workflow's reward presumes: SmolLM2-135M-Instruct, shown passages that hold the
answer, names it exactly almost never, so a policy rewarded for right answers gets no
signal to climb. The papers' policies are instruct models that have the skill before
training. A warm start gives it: the workflow writes turns played right from the task's gold
data (`Workflow.demonstrations`), each policy's adapter is fitted to its roles' turns by
maximum likelihood of the reply tokens (the prompt is context, not target), and an RL run
starts from the adapter (`policies: {<policy>: {init_from: DIR/<policy>}}`).

Demonstrations should come from data the run never validates on (another task seed: for the
built-in multi-hop task another invented world). A share of them is held out, and the policy's
sampled replies to those are read before and after (the reply's final answer against the
target's), so the record says what the warm start taught, not just that the loss fell.
"""
from __future__ import annotations

import asyncio
import json
import math
import os
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from rolecall.algo.batch import Row, collate, micro_batches
from rolecall.algo.forward import completion_logit_parts, over_parts
from rolecall.algo.memory import micro_batch_tokens
from rolecall.engines.base import GenRequest
from rolecall.errors import UserError
from rolecall.fsio import write_durable
from rolecall.loss import token_logprobs
from rolecall.parsing import final_answer
from rolecall.policies.adapter_files import model_of, save_adapter
from rolecall.policies.lora_router import router_for
from rolecall.policies.model import set_training
from rolecall.rewards.qa import normalize_answer
from rolecall.rundir.fingerprint import model_fingerprint
from rolecall.rundir.init_from import WARM_START_RECORD as RECORD
from rolecall.train.stack import Stack
from rolecall.types import Demonstration, Problem


@dataclass
class Demos:
    """The demonstrations of each trainable policy, split into training and held-out ones."""

    train: dict[str, list[Demonstration]] = field(default_factory=dict)
    held_out: dict[str, list[Demonstration]] = field(default_factory=dict)
    untrained_roles: Counter = field(default_factory=Counter)  # demonstrations of roles no trainable policy plays


def collect(stack: Stack, problems: list[Problem], held_out: float, seed: int) -> Demos:
    """Every problem's demonstrations, by the policy its role is routed to. `held_out` of the
    problems that have any (at least one when two or more do), chosen by `seed`, are kept aside
    whole: no held-out question is trained on through another of its turns."""
    async def gather() -> list[list[Demonstration]]:
        return [await stack.workflow.demonstrations(p) for p in problems]

    written = [demos for demos in asyncio.run(gather()) if demos]
    order = list(range(len(written)))
    random.Random(seed).shuffle(order)
    k = max(1, round(held_out * len(written))) if held_out > 0 and len(written) > 1 else 0
    aside = set(order[:k])
    trainable = {p for base in stack.bases.values() for p in base.trainable}
    out = Demos()
    for i in order:
        for d in written[i]:
            policy = stack.routing.routes.get(d.role)
            if policy not in trainable:
                out.untrained_roles[d.role] += 1
                continue
            (out.held_out if i in aside else out.train).setdefault(policy, []).append(d)
    for policy in out.train:
        out.held_out.setdefault(policy, [])
    return out


def _base(stack: Stack, policy: str):
    """The base model (with its tokenizer and engine) that holds `policy`'s adapter."""
    return next(b for b in stack.bases.values() if policy in b.adapters)


def encode(stack: Stack, policy: str, demo: Demonstration) -> Row:
    """The demonstration as the trainer's row: the prompt as the engine renders it for sampling,
    the target's tokens and the end-of-turn token as the completion."""
    base = _base(stack, policy)
    prompt = base.tok(base.engine.render(demo.messages), add_special_tokens=False)["input_ids"]
    reply = base.tok(demo.target, add_special_tokens=False)["input_ids"]
    stop = base.engine.stop_ids[:1]
    ids = list(prompt) + list(reply) + stop
    return Row(ids, len(prompt), [0.0] * (len(ids) - len(prompt)), 1.0, demo.role, demo.role, policy)


def steps_for(n: int, epochs: float, batch: int) -> int:
    """Optimizer steps that pass over `n` demonstrations `epochs` times, `batch` at a time (at least one)."""
    return max(1, math.ceil(epochs * n / batch))


def fit(stack: Stack, policy: str, demos: list[Demonstration], *, steps: int, batch: int, lr: float, seed: int,
        progress: Callable[[int, int, float], None] | None = None) -> list[dict]:
    """`steps` AdamW steps of `batch` demonstrations (drawn without replacement, reshuffled each
    pass) on `policy`'s adapter; the mean reply-token negative log-likelihood of each step."""
    base = _base(stack, policy)
    model = base.model
    rows = [encode(stack, policy, d) for d in demos]
    params = stack.optims[policy].params
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    budget = micro_batch_tokens(stack.cfg.algo.micro_batch_tokens, model)
    rng, order, curve = random.Random(seed), [], []
    set_training(model, True)
    with router_for(model).policy(policy):
        for step in range(1, steps + 1):
            if len(order) < batch:
                more = list(range(len(rows)))
                rng.shuffle(more)
                order += more
            chosen, order = [rows[i] for i in order[:batch]], order[batch:]
            tokens = sum(r.n_completion for r in chosen)
            total = 0.0
            for mb in micro_batches(chosen, budget):
                b = collate(mb, base.tok.pad_token_id, model.device)
                logp = over_parts(completion_logit_parts(model, b), b["targets"], lambda z, t: token_logprobs(z, t))
                loss = -(logp * b["mask"]).sum() / tokens
                loss.backward()
                total += float(loss.detach())
            torch.nn.utils.clip_grad_norm_(params, stack.optims[policy].grad_clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
            curve.append({"step": step, "nll": round(total, 4)})
            if progress is not None:
                progress(step, steps, total)
    set_training(model, False)
    return curve


def reproduced(stack: Stack, policy: str, demos: list[Demonstration], seed: int) -> dict:
    """How often `policy`'s sampled reply (the run's temperature, a seed per request) gives the
    target's final answer (both read as the last `\\boxed{}`, else the last line; normalised):
    `exact`, and `contains` when the target's answer appears anywhere in the reply; `by_role`
    as well when the policy plays several roles."""
    if not demos:
        return {"demonstrations": 0}
    cfg = stack.cfg
    reqs = [GenRequest(messages=d.messages, policy=policy, seed=seed + i,
                       max_new_tokens=cfg.rollout.max_new_tokens_by_role.get(d.role, cfg.rollout.max_new_tokens))
            for i, d in enumerate(demos)]
    replies = [o.completion_text for o in stack.engine.generate(reqs, temperature=cfg.rollout.temperature)]

    def answer(text: str) -> str:
        return normalize_answer(final_answer(text, "boxed_or_last_line").text or "")

    def rates(pairs: list[tuple[Demonstration, str]]) -> dict:
        wanted = [answer(d.target) for d, _ in pairs]
        return {"demonstrations": len(pairs),
                "exact": sum(answer(r) == w for (_, r), w in zip(pairs, wanted)) / len(pairs),
                "contains": sum(bool(w) and f" {w} " in f" {normalize_answer(r)} " for (_, r), w in zip(pairs, wanted))
                / len(pairs),
                "examples": [{"target": d.target, "reply": r} for d, r in pairs[:3]]}

    pairs = list(zip(demos, replies))
    roles = sorted({d.role for d in demos})
    out = rates(pairs)
    if len(roles) > 1:
        out["by_role"] = {role: rates([(d, r) for d, r in pairs if d.role == role]) for role in roles}
    return out


def from_base(cfg):
    """`cfg` with no policy's `init_from`: a warm start fits adapters from the base model, and a
    config's `init_from` is where its RL runs start (often this warm start's own output)."""
    if not cfg.policies:
        return cfg
    return cfg.model_copy(update={"policies": {name: pol.model_copy(update={"init_from": None})
                                               for name, pol in cfg.policies.items()}})


def warm_start(stack: Stack, *, epochs: float, batch: int, lr: float, held_out: float = 0.1, seed: int = 0,
               progress: Callable[[str, int, int, float], None] | None = None) -> dict:
    """Fit every trainable policy that has demonstrations, `epochs` passes over its own (so a
    policy playing two roles takes as many passes over each role's as two policies would); its
    record (what `rolecall warm-start` writes beside the adapters). Raises ValueError when no
    policy has any."""
    t0 = time.time()
    demos = collect(stack, stack.train_P, held_out, seed)
    if not demos.train:
        why = (f"; its demonstrations are for roles no trainable policy plays ({dict(demos.untrained_roles)})"
               if demos.untrained_roles else "")
        raise ValueError(f"workflow {stack.workflow.name!r} wrote no demonstrations a trainable policy could learn "
                         f"from on these {len(stack.train_P)} problems{why}")
    record: dict = {"epochs": epochs, "batch": batch, "lr": lr, "held_out": held_out, "seed": seed, "policies": {}}
    if demos.untrained_roles:
        record["untrained_roles"] = dict(demos.untrained_roles)
    for policy, train in demos.train.items():
        say = (lambda s, n, loss, _p=policy: progress(_p, s, n, loss)) if progress else None
        before = reproduced(stack, policy, demos.held_out[policy], seed)
        steps = steps_for(len(train), epochs, batch)
        curve = fit(stack, policy, train, steps=steps, batch=batch, lr=lr, seed=seed, progress=say)
        after = reproduced(stack, policy, demos.held_out[policy], seed)
        record["policies"][policy] = {"roles": sorted({d.role for d in train}), "train": len(train), "steps": steps,
                                      "held_out_before": before, "held_out_after": after, "curve": curve}
    record["seconds"] = round(time.time() - t0, 1)
    return record


def check_out(out: Path) -> None:
    """Only a new or empty folder, or an earlier warm start's (its record), is written to: a folder
    of the user's own files, a file, or a link to nothing is refused before any model loads."""
    if out.is_symlink() and not out.exists():
        raise UserError(f"--out {str(out)!r} is a link to {os.readlink(out)!r}, which does not exist")
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {str(out)!r} is a file; a warm start is a folder")
    if out.is_dir() and not (out / RECORD).is_file() and any(out.iterdir()):
        held = sorted(p.name for p in out.iterdir())
        raise UserError(f"--out {str(out)!r} is not empty and holds no warm start (it holds "
                        f"{', '.join(held[:5])}{' ...' if len(held) > 5 else ''}); nothing was written. "
                        "Choose an empty or new folder")


def write(stack: Stack, record: dict, out: Path, source: dict) -> dict:
    """Each fitted policy's adapter in `out/<policy>/` and the record, with `source` (what made
    it: config, overrides, machine) and the base model's fingerprint, in `out/warm_start.json`;
    the record as written."""
    out.mkdir(parents=True, exist_ok=True)
    models = stack.models_by_adapter()
    for policy in record["policies"]:
        save_adapter(model_of(models, policy), policy, out / policy)
    full = {**source, "model": model_fingerprint(stack.cfg), **record}
    write_durable(out / RECORD, json.dumps(full, indent=1) + "\n")
    return full
