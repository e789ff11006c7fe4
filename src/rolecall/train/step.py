"""One RL step, as named stages: problems -> rollout -> score -> credit -> advantages -> update -> metrics.

`play` rolls out and scores (used by training and validation alike); `train_step` is one
step of the RL trainer; `validate` measures the workflow's final-answer accuracy.
"""
from __future__ import annotations

import functools
import math
import random
import time
from collections import Counter
from statistics import fmean, pvariance

import torch

from rolecall.algo.batch import rows_for_policy
from rolecall.advantages import estimator_of_roles, get_estimator, options_of
from rolecall.algo.credit import advantages, credit
from rolecall.algo.scoring import score, status_shares
from rolecall.algo.update import update_policies
from rolecall.diagnostics.rollout_metrics import rollout_metrics
from rolecall.policies.routing import BASE_POLICY
from rolecall.rewards.verifier import as_check
from rolecall.rollout import replay, rollout
from rolecall.rundir.guards import nonfinite_counts
from rolecall.train.memory import give_back
from rolecall.train.stack import Stack
from rolecall.types import Episode, Problem


@functools.lru_cache(maxsize=4)
def _epoch_order(n: int, seed: int, epoch: int) -> tuple[int, ...]:
    """The epoch's permutation, shuffled once and not once per step (ms per step on large sets)."""
    order = list(range(n))
    random.Random(seed * 7919 + epoch).shuffle(order)
    return tuple(order)


def problems_for_step(train_P: list[Problem], n: int, seed: int, step: int) -> list[Problem]:
    """Step s reads a fixed slice of a seeded per-epoch permutation: resume needs only the step."""
    out: list[Problem] = []
    pos = (step - 1) * n
    while len(out) < n:
        epoch, offset = divmod(pos, len(train_P))
        order = _epoch_order(len(train_P), seed, epoch)
        take = min(n - len(out), len(train_P) - offset)
        out += [train_P[i] for i in order[offset: offset + take]]
        pos += take
    return out


def roll_out(stack: Stack, problems: list[Problem], group: int, routes: dict[str, str], seed: int,
             training: bool = False) -> list[Episode]:
    torch.manual_seed(seed)
    # Engines outside this process's model (a vLLM engine, Ray actors) get the current
    # adapters first, as a new version.
    for outside in (stack.engine, stack.actors):
        if hasattr(outside, "publish"):
            outside.publish(stack.models_by_adapter())
    if stack.actors is not None:  # Ray actors: a share each
        return stack.actors.rollout(problems, group, routes, stack.cfg.rollout.temperature, seed, training)
    first = 0
    if stack.dp is not None:  # this rank's share of the problems, numbered as in the whole step
        first, end = stack.dp.share(len(problems))
        problems = problems[first:end]
    # Data-parallel ranks always seed each request: the shares then play the episodes one process would.
    seeded = stack.cfg.rollout.request_seeds or stack.dp is not None
    return rollout(stack.workflow, problems, group, stack.engine, routes, stack.max_new_tokens,
                   stack.cfg.rollout.temperature, episode_timeout_s=stack.cfg.rollout.episode_timeout_s,
                   check=as_check(stack.verifier), training=training, seed=seed if seeded else None,
                   first_group=first)


def play(stack: Stack, problems: list[Problem], group: int, routes: dict[str, str], seed: int,
         training: bool = False) -> tuple[list[Episode], dict[str, float]]:
    """Roll out and score: the episodes (every one of the step's, in order) and the verdict shares.

    On a data-parallel run each rank scores its own share before the shares are gathered, so
    every episode is graded once and every rank holds the same rewards."""
    episodes = roll_out(stack, problems, group, routes, seed, training)
    statuses = score(episodes, stack.verifier)
    if stack.dp is not None:
        episodes = stack.dp.gather(episodes)
        statuses = status_shares(episodes)
    return episodes, statuses


def validate(stack: Stack, *, base: bool = False) -> dict[str, float]:
    """Final-answer accuracy of the workflow on the validation split (one sample each)."""
    return validate_episodes(stack, base=base)[0]


def validate_episodes(stack: Stack, *, base: bool = False) -> tuple[dict[str, float], list[Episode]]:
    """Validation metrics and the episodes behind them.

    Same sampling seed every time, so two validations differ only by the weights.
    `val/accuracy` is over the scorable samples (NaN when none is): a sample the verifier could not
    score is not a wrong answer. `val/unscorable_frac` is the fraction that was unscorable;
    `val/n` the scorable samples and `val/accuracy_se` the standard error of `val/accuracy`
    (`accuracy_se`), which the validation_cliff alarm weighs a fall against.
    """
    routes = {r: BASE_POLICY for r in stack.routing.routes} if base else stack.routing.routes
    eps, _ = play(stack, stack.val_P, 1, routes, seed=stack.cfg.train.seed + 10_007)
    m = {f"val/{k}": v for k, v in {**rollout_metrics(eps, role_diagnostics=stack.workflow.role_diagnostics),
                                    **stack.workflow.metrics(eps)}.items()
         if not k.startswith("role/")}
    scorable = [ep for ep in eps if ep.reward is not None]
    m["val/accuracy"] = fmean(1.0 if ep.reward == 1.0 else 0.0 for ep in scorable) if scorable else float("nan")
    m["val/unscorable_frac"] = (len(eps) - len(scorable)) / len(eps) if eps else 0.0
    m["val/n"], m["val/accuracy_se"] = accuracy_se(eps)
    return m, eps


def accuracy_se(episodes: list[Episode]) -> tuple[int, float]:
    """(scorable samples, standard error of the accuracy over them); the error is NaN when none is scorable.

    The unit of sampling is the problem, not the sample: several answers to one problem are not
    independent, so the error comes from each problem's mean correctness a_p, se = sqrt(var(a_p) / P)
    over the P problems with a scorable sample. var is the population variance (divide by P): with
    one sample per problem a_p is 0 or 1 and this is the binomial sqrt(p(1-p)/n) exactly, the same
    error the alarm computes from `val/n` for a row that lacks this one (the P-1 form would differ
    by a factor sqrt(P/(P-1)), 7% at 8 problems, 1% at 50).
    """
    by_problem: dict[str, list[float]] = {}
    for ep in episodes:
        if ep.reward is not None:
            by_problem.setdefault(ep.problem.uid, []).append(1.0 if ep.reward == 1.0 else 0.0)
    n = sum(map(len, by_problem.values()))
    if not by_problem:
        return 0, float("nan")
    means = [fmean(v) for v in by_problem.values()]
    return n, math.sqrt(pvariance(means) / len(means))


def notices(stack: Stack, what: str, episodes: list[Episode], *, validation: bool = False, skipped: bool = False,
            samples_file: str | None = None) -> list[str]:
    """What the user should read after scoring `what` ("step 3", "validation at step 0"): the
    verifier's notices (a custom reward's first timeout, raise, crash or bad value; drained), and one
    line when most samples were unscorable, or the step was skipped for it."""
    out = verifier_notices(stack)
    bad = [ep for ep in episodes if ep.reward is None]
    if episodes and (skipped or 2 * len(bad) > len(episodes)):
        r = stack.cfg.reward
        statuses = ", ".join(f"{k} {v}" for k, v in Counter(ep.status or "unscored" for ep in bad).most_common())
        if skipped:
            then = (f"more than reward.max_unscorable_frac={r.max_unscorable_frac:g}, so the step was skipped "
                    f"(no update; {r.max_skipped_steps} skipped in a row halt the run)")
        elif validation and len(bad) == len(episodes):
            then = "val/accuracy is NaN (no scorable sample)"
        elif validation:
            then = f"val/accuracy is over the {len(episodes) - len(bad)} scorable ones"
        else:
            then = "they are left out of the group statistics"
        where = f"; {samples_file} has the reasons" if samples_file else ""
        out.append(f"warning: {what}: {len(bad)} of {len(episodes)} samples unscorable by the {r.name} verifier "
                   f"({statuses}); {then}{where}")
    return out


def verifier_notices(stack: Stack) -> list[str]:
    """The verifier's notices since the last call (a custom reward's first timeout, raise, crash, bad value)."""
    drain = getattr(getattr(stack, "verifier", None), "drain_notices", None)
    return list(drain()) if drain is not None else []


def evaluation_notices(stack: Stack, metrics: dict) -> list[str]:
    """`rolecall eval`'s notices: the verifier's, and a warning when most samples were unscorable."""
    out = verifier_notices(stack)
    frac = metrics.get("val/unscorable_frac") or 0.0
    if frac > 0.5:
        out.append(f"warning: {frac:.0%} of the validation samples were unscorable by the {stack.cfg.reward.name} "
                   "verifier; val/accuracy is over the scorable ones only")
    return out


def counterfactual_replays(stack: Stack, episodes: list[Episode], step: int) -> tuple[dict, dict[str, float]]:
    """Replay up to the counterfactual estimator's `replays` turns of this step that its roles cannot
    re-read (`Workflow.replay_roles`), drawn at random, and grade each replayed answer:
    ({(id(episode), turn index): outcome}, the cost: turns replayed, model calls, tokens, seconds)."""
    cfg, wf = stack.cfg, stack.workflow
    plan = estimator_of_roles(cfg.algo.estimator, wf.roles)
    per_role = not isinstance(cfg.algo.estimator, str)
    roles = {r for r, n in plan.items() if r in wf.replay_roles
             and getattr(get_estimator(n, options_of(n, cfg.algo.estimator_options, per_role)), "replays", 0)}
    if not roles:
        return {}, {}
    budget = int(next(get_estimator(plan[r], options_of(plan[r], cfg.algo.estimator_options, per_role)).replays
                      for r in roles))
    pool = [(ep, t.index) for ep in episodes if ep.reward is not None for t in ep.turns
            if t.role in roles and t.index not in wf.counterfactuals(ep)]
    chosen = random.Random(cfg.train.seed * 7_919 + step).sample(pool, min(budget, len(pool)))
    if not chosen or stack.actors is not None or stack.dp is not None:  # replays run in-process only
        return {}, {"cf/replay_candidates": float(len(pool)), "cf/replays": 0.0}
    t0 = time.time()
    played = replay(wf, chosen, stack.engine, stack.routing.routes, stack.max_new_tokens,
                    cfg.rollout.temperature, seed=cfg.train.seed * 1_000_003 + step + 500_009)
    outcomes = as_check(stack.verifier)([p.final_answer for p in played], [ep.problem for ep, _ in chosen])
    return ({(id(ep), turn): v for (ep, turn), v in zip(chosen, outcomes)},
            {"cf/replay_candidates": float(len(pool)), "cf/replays": float(len(chosen)),
             "cf/replay_calls": float(sum(len(p.turns) for p in played)),
             "cf/replay_tokens": float(sum(len(t.completion_ids) for p in played for t in p.turns)),
             "cf/replay_s": time.time() - t0})


def train_step(stack: Stack, step: int) -> tuple[dict, list[Episode]]:
    cfg = stack.cfg
    t0 = time.time()
    problems = problems_for_step(stack.train_P, cfg.rollout.problems_per_step, cfg.train.seed, step)
    episodes, statuses = play(stack, problems, cfg.rollout.group_size, stack.routing.routes,
                              seed=cfg.train.seed * 1_000_003 + step, training=True)
    give_back()  # the rollout's freed heap, before the update allocates its own (train.memory)
    t_roll = time.time()
    row: dict = {"step": step}
    row.update(statuses)
    row.update(credit(episodes, stack.workflow))
    replayed, replay_metrics = counterfactual_replays(stack, episodes, step)
    row.update(replay_metrics)
    turns, adv_N, adv_metrics = advantages(episodes, cfg.algo.estimator, cfg.algo.group_by,
                                           cfg.algo.estimator_options, stack.workflow, replayed)
    row.update(adv_metrics)
    full = cfg.train.diagnostics == "full"
    row.update(rollout_metrics(episodes, signatures=full, role_diagnostics=stack.workflow.role_diagnostics))
    row["rollout/timed_out_frac"] = fmean(ep.timed_out for ep in episodes) if episodes else 0.0
    # Unscorable and non-finite rewards alike (reward None) leave nothing to learn from.
    unscorable = sum(ep.reward is None for ep in episodes) / max(1, len(episodes))
    policy_metrics: dict[str, dict] = {}
    if unscorable > cfg.reward.max_unscorable_frac:
        # The verifier failed on too much of the batch: an update would learn from noise.
        row["skipped/unscorable"] = 1.0
    else:
        rng = random.Random(cfg.train.seed * 31 + step)
        updated = {}
        dp = stack.dp  # a process group: each rank updates on its share of the rows
        for base in stack.bases.values():  # each base model trains its own policies' adapters
            rows_by_policy = {p: rows_for_policy(turns, adv_N, p) for p in base.trainable}
            if not rows_by_policy:
                continue
            updated.update(update_policies(
                base.model, rows_by_policy, stack.optims, cfg.algo, cfg.optim, pad_id=base.tok.pad_token_id,
                temperature=cfg.rollout.temperature, rng=rng, mini_batch_rows=cfg.mini_batch_rows(),
                progress=((step - 1) / cfg.train.steps, step / cfg.train.steps),
                kl_ref=full and cfg.train.kl_ref, kl_ref_rows=cfg.train.kl_ref_rows, grad_shares=full, dp=dp))
        for policy, (per_role, pol) in updated.items():
            policy_metrics[policy] = pol
            row.update({f"policy/{policy}/{k}": v for k, v in pol.items()})
            for role, m in per_role.items():
                row.update({f"role/{role}/{k}": v for k, v in m.items() if k != "tokens"})
    row.update(nonfinite_counts(episodes, policy_metrics))
    give_back()
    row["time/rollout_s"] = t_roll - t0
    row["time/step_s"] = time.time() - t0
    return row, episodes
