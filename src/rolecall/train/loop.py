"""The training loop, as named stages: rollout -> score -> advantage -> update -> log.

`build_stack` loads everything once; `train_step` is one RL step; `train` runs the
steps with validation, checkpoints and a progress bar.
"""
from __future__ import annotations

import contextlib
import functools
import random
import signal
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean
from typing import Callable

import torch

from rolecall.config import Config
from rolecall.diagnostics.alarms import AlarmMonitor, AlarmThresholds
from rolecall.diagnostics.summary import write_summary
from rolecall.distributed.data_parallel import DataParallel
from rolecall.engines.hf import HFEngine
from rolecall.engines.routed import RoutedEngine  # noqa: F401  (the Stack's engine type)
from rolecall.errors import UserError
from rolecall.tasks.dataset import load_dataset_problems
from rolecall.policies.model import load_tokenizer, resolve_model_dir
from rolecall.rewards.verifier import Verifier, build_verifier
from rolecall.policies.routing import BASE_POLICY, Routing, build_routing
from rolecall.rollout import rollout
from rolecall.tasks.arithmetic import ArithmeticTask
from rolecall.tasks.multihop import MultiHopTask
from rolecall.train.batch import rows_for_policy
from rolecall.train.bases import Base, adapter_models, build_bases, mark_trainable, team_engine
from rolecall.train.checkpoint import (CheckpointDamaged, checkpoint_fingerprint, discard_partial, load_checkpoint,
                                      resume_point, save_checkpoint, set_aside)
from rolecall.train.compat import check_resume, run_fingerprint
from rolecall.train.cpu_share import cpu_share_or_none
from rolecall.train.guards import NonFiniteStreak, nonfinite_counts
from rolecall.train.metrics import rollout_metrics
from rolecall.train.run_dir import RunDir, hold
from rolecall.train.stop import StopRequest, TrainingStopped, resume_command
from rolecall.train.sinks import build_sinks
from rolecall.train.stages import advantages, checker, credit, score, status_shares
from rolecall.train.optim import PolicyOptim, build_optimizers
from rolecall.train.update import update_policies
from rolecall.types import Episode, Problem
from rolecall.workflows import Workflow, build_workflow, workflow_prompts


class VerifierFailure(UserError, RuntimeError):
    """The verifier failed on most of the batch for several steps in a row."""


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


def load_problems(cfg: Config, count_tokens: Callable[[str], int] | None = None,
                  log: Callable[[str], None] = print) -> tuple[list[Problem], list[Problem]]:
    """(train, validation) problems from the built-in task or the local dataset."""
    if cfg.task.name == "dataset":
        train_P, val_P = load_dataset_problems(cfg.data, count_tokens, log=log)
    else:
        t = cfg.task
        task = (MultiHopTask(people=t.people, n_val=t.n_val, seed=t.seed) if t.name == "multihop"
                else ArithmeticTask(digits=t.digits, ops=t.ops, n_val=t.n_val, seed=t.seed))
        train_P, val_P = task.train(), task.validation()
    if not train_P or not val_P:
        raise ValueError(f"task: empty dataset (train {len(train_P)}, validation {len(val_P)} problems)")
    return train_P, val_P


def token_counter(tok) -> Callable[[str], int]:
    """Prompt length in the model's own tokens (data.max_prompt_tokens)."""
    return lambda text: len(tok(text, add_special_tokens=False)["input_ids"])


def preflight(cfg: Config) -> dict[str, object]:
    """Check every input a run needs without loading weights: the model directory and its
    tokenizer/chat template, every dataset row, and that the verifier can start (e.g. the
    code sandbox can isolate). Raises with the field at fault; returns a short summary."""
    m = cfg.model
    model_dir = resolve_model_dir(m.path)
    tok = load_tokenizer(m.path, m.chat_template)
    lines: list[str] = []
    train_P, val_P = load_problems(cfg, token_counter(tok), log=lines.append)
    verifier = build_verifier(cfg.reward_cfg())
    try:
        isolation = getattr(getattr(verifier, "sandbox", None), "isolation", None)
    finally:
        verifier.close()
    return {"model": str(model_dir), "train_problems": len(train_P), "val_problems": len(val_P),
            "data_report": lines, "verifier": cfg.reward.name, **({"sandbox": isolation} if isolation else {})}


def build_stack(cfg: Config) -> Stack:
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    workflow = build_workflow(cfg.workflow.name, workflow_prompts(cfg.workflow.name, cfg.workflow.prompts),
                              cfg.workflow.options)
    routing = build_routing(cfg.routing, workflow.roles, cfg.policy_table())
    m = cfg.model
    tok = load_tokenizer(m.path, m.chat_template)
    train_P, val_P = load_problems(cfg, token_counter(tok))
    verifier = build_verifier(cfg.reward_cfg())  # before the model: a sandbox that cannot isolate fails fast
    bases = build_bases(cfg, routing, tok)
    optims: dict[str, PolicyOptim] = {}
    for base in bases.values():
        start_from_adapters(cfg, base)
        mark_trainable(base)  # each optimizer owns exactly its adapter's tensors
        optims.update(build_optimizers(base.model, base.trainable, cfg.optim, cfg.policy_optim()))
    main = bases[m.path]
    engine = team_engine(bases, m.path)
    if cfg.rollout.engine == "vllm":
        engine = vllm_engine(cfg, routing, tok, bases)
    actors = None
    if cfg.rollout.actors:
        from rolecall.distributed.ray_rollout import RayRollout

        actors = RayRollout(cfg.model_dump(mode="json"), cfg.rollout.actors, address=cfg.rollout.ray_address,
                            gpus=cfg.rollout.actor_gpus)
    return Stack(cfg, workflow, routing, main.model, tok, engine, optims, train_P, val_P, verifier, bases, actors,
                 DataParallel.current())


def vllm_engine(cfg: Config, routing: Routing, tok, bases: dict[str, Base]):
    """The vLLM engine for a single-base run (the HF model stays for training)."""
    from rolecall.engines.vllm import VLLMEngine

    if len(bases) > 1:
        raise UserError("rollout.engine=vllm serves one base model; this run's policies sit on "
                        f"{len(bases)} ({sorted(bases)})")
    ranks = [cfg.lora_of(p).r for p in routing.adapters] or [cfg.lora.r]
    return VLLMEngine(resolve_model_dir(cfg.model.path), tok, adapters=routing.adapters, max_lora_rank=max(ranks),
                      memory_fraction=cfg.rollout.vllm_memory_fraction, enable_thinking=cfg.model.enable_thinking,
                      seed=cfg.train.seed, ignore_eos=cfg.rollout.ignore_eos)


def start_from_adapters(cfg: Config, base: Base) -> dict[str, Path]:
    """Load each `init_from` adapter of `base`'s policies (before optimizers exist); {policy: adapter dir}."""
    from rolecall.policies.init_from import check_adapter, load_init, resolve_adapter
    from rolecall.train.compat import model_fingerprint

    found = {}
    for policy, path in cfg.policy_init().items():
        if policy not in base.adapters:
            continue
        adapter = resolve_adapter(policy, path)
        check_adapter(policy, adapter, cfg.lora_of(policy), model_fingerprint(cfg, base.path))
        load_init(base.model, policy, adapter)
        found[policy] = adapter
    return found


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


def _rollout(stack: Stack, problems: list[Problem], group: int, routes: dict[str, str], seed: int,
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
                   check=checker(stack.verifier), training=training, seed=seed if seeded else None,
                   first_group=first)


def play(stack: Stack, problems: list[Problem], group: int, routes: dict[str, str], seed: int,
         training: bool = False) -> tuple[list[Episode], dict[str, float]]:
    """Roll out and score: the episodes (every one of the step's, in order) and the verdict shares.

    On a data-parallel run each rank scores its own share before the shares are gathered, so
    every episode is graded once and every rank holds the same rewards."""
    episodes = _rollout(stack, problems, group, routes, seed, training)
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
    """
    routes = {r: BASE_POLICY for r in stack.routing.routes} if base else stack.routing.routes
    eps, _ = play(stack, stack.val_P, 1, routes, seed=stack.cfg.train.seed + 10_007)
    m = {f"val/{k}": v for k, v in {**rollout_metrics(eps, role_diagnostics=stack.workflow.role_diagnostics),
                                    **stack.workflow.metrics(eps)}.items()
         if not k.startswith("role/")}
    m["val/accuracy"] = fmean(1.0 if ep.reward == 1.0 else 0.0 for ep in eps)
    return m, eps


def train_step(stack: Stack, step: int) -> tuple[dict, list[Episode]]:
    cfg = stack.cfg
    t0 = time.time()
    problems = problems_for_step(stack.train_P, cfg.rollout.problems_per_step, cfg.train.seed, step)
    episodes, statuses = play(stack, problems, cfg.rollout.group_size, stack.routing.routes,
                              seed=cfg.train.seed * 1_000_003 + step, training=True)
    t_roll = time.time()
    row: dict = {"step": step}
    row.update(statuses)
    row.update(credit(episodes, stack.workflow))
    turns, adv_N, adv_metrics = advantages(episodes, cfg.algo.estimator, cfg.algo.group_by,
                                           cfg.algo.estimator_options)
    row.update(adv_metrics)
    full = cfg.train.diagnostics == "full"
    row.update(rollout_metrics(episodes, signatures=full, role_diagnostics=stack.workflow.role_diagnostics))
    row["rollout/timed_out_frac"] = fmean(bool(ep.info.get("timed_out")) for ep in episodes) if episodes else 0.0
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
    row["time/rollout_s"] = t_roll - t0
    row["time/step_s"] = time.time() - t0
    return row, episodes


def train(cfg: Config, out: Path, *, resume: bool = False, force: bool = False, skip_damaged: bool = False,
          on_event: Callable[[str, dict], None] | None = None, stop_after: int | None = None,
          notify: Callable[[str], None] | None = None) -> Path:
    """Run (or continue) training into `out`. `on_event(kind, row)` sees every logged row;
    `notify(text)` gets what the user should read (default: stderr).

    The run directory is held by this process for the whole call (`RunDirBusy` if another
    holds it). The first SIGINT/SIGTERM finishes the current step, saves a checkpoint and
    raises `TrainingStopped` naming it; a second one stops at once.
    `stop_after` ends the process early after that step (as a kill would, but cleanly);
    the schedule still follows `train.steps`, so a resume continues the same trajectory.
    A resume onto a different model, tokenizer, data, workflow, routing, LoRA or reward is
    refused (`ResumeRefused`) unless `force`; a resume past a damaged checkpoint is refused
    (`CheckpointDamaged`) unless `skip_damaged`, which moves it aside first.
    """
    import torch.distributed as dist

    joined = dist.is_available() and not dist.is_initialized()
    dp = DataParallel.from_env(cfg.model.device)  # launched by torchrun: join its process group
    joined = joined and dp is not None
    try:
        if dp is not None:
            if cfg.metapolicy is not None or cfg.rollout.actors:
                raise UserError("a data-parallel run (torchrun) trains LLM adapters in-process: it takes no "
                                f"{'metapolicy: section' if cfg.metapolicy is not None else 'rollout.actors'}")
            out = Path(dp.broadcast(str(out)))  # rank 0's directory (a default name carries the time)
        lead = dp is None or dp.lead
        run = RunDir(out)
        if resume and not (run.path / "config.yaml").is_file():
            raise RunDirMissing(f"--resume {str(run.path)!r}: no config.yaml there (not a run directory)")
        if lead:
            notify = notify or (lambda text: print(text, file=sys.stderr))
        else:  # the other ranks compute; rank 0 speaks and writes
            notify, on_event = (lambda text: None), None
        with (hold(run.path) if lead else contextlib.nullcontext()), StopRequest(notify) as stop:
            if cfg.metapolicy is not None:  # a deliberation meta-policy: its own stages, agents frozen
                from rolecall.train.deliberate import train_metapolicy

                try:
                    train_metapolicy(cfg, run, resume, force, on_event, notify, stop)
                finally:
                    _summarize(run, notify)
                return run.path
            return _train(cfg, run, resume, force, skip_damaged, on_event, stop_after, notify, stop, dp)
    finally:
        if joined:
            dist.destroy_process_group()


class PeerFailed(UserError, RuntimeError):
    """Another rank of a data-parallel run failed; the message is its error."""


def _on_lead(dp: DataParallel | None, work: Callable[[], object]) -> object:
    """`work()` on rank 0 only; its result, or its error, on every rank (so no rank waits forever
    in a collective for a rank that has failed)."""
    if dp is None:
        return work()
    failed, result = None, None
    if dp.lead:
        try:
            result = work()
        except BaseException as e:  # noqa: BLE001 - re-raised below, after the others are told
            failed = e
    told = dp.broadcast(("error", f"{type(failed).__name__}: {failed}") if failed is not None else ("ok", result))
    if failed is not None:
        raise failed
    if told[0] == "error":
        raise PeerFailed(f"rank 0 failed: {told[1]}")
    return told[1]


class RunDirMissing(UserError, FileNotFoundError):
    """--resume names a directory that holds no run."""


def _train(cfg: Config, run: RunDir, resume: bool, force: bool, skip_damaged: bool,
           on_event: Callable[[str, dict], None] | None, stop_after: int | None,
           notify: Callable[[str], None], stop: StopRequest, dp: DataParallel | None = None) -> Path:
    """The RL loop. On a data-parallel run every rank runs it in step; only rank 0 (`lead`)
    writes the run directory and the sinks, and rank 0 decides where a resume starts."""
    t_start = time.time()
    sinks: list = []
    monitor: AlarmMonitor | None = None
    lead = dp is None or dp.lead

    def validation(step: int) -> None:
        if share is not None:
            share.apply()
        m, eps = validate_episodes(stack)
        emit("val", {"step": step, **m})
        if lead:
            run.log_samples(step, eps, cfg.train.val_samples, validation=True)

    def emit(kind: str, row: dict) -> None:
        if not lead:
            return
        row["time/elapsed_s"] = round(time.time() - t_start, 2)  # wall clock of this process, for curves
        run.log(row)
        for sink in sinks:
            sink.write(kind, row)
        if on_event:
            on_event(kind, row)
        if monitor is not None and kind != "alarm":
            for event in monitor.observe(row):
                emit("alarm", event)

    def save(step: int) -> Path | None:
        if not lead:
            return None
        return save_checkpoint(run.path, step, stack.models_by_adapter(), stack.optims, stack.routing.adapters,
                               cfg.train.keep_last)

    def stopping() -> bool:  # every rank stops at the same step when any of them is asked to
        return dp.any_true(stop.requested) if dp is not None else stop.requested

    def out_of_time() -> bool:  # train.max_minutes, decided on every rank alike (as a stop is)
        limit = cfg.train.max_minutes
        if limit is None:  # the same config on every rank: no collective needed
            return False
        late = time.time() - t_start >= limit * 60
        return dp.any_true(late) if dp is not None else late

    def val_due(step: int) -> bool:
        return step == 0 or step % cfg.train.val_every == 0 or step == cfg.train.steps

    def check_run_dir() -> tuple:
        """Rank 0, before anything loads: refuse a damaged run or start a new one."""
        if not resume:
            run.create(cfg)
            return None, 0
        # damaged checkpoints and logs are evidence: refuse before anything loads or changes
        logged = max((r["step"] for r in run.check_logs()), default=0)
        point = resume_point(run.path)
        if point.damaged_newer and not skip_damaged:
            raise CheckpointDamaged(point.refusal(run.path))
        for p, why in point.damaged_older:
            notify(f"note: older checkpoint {p.name} is damaged ({why}); left where it is")
        return point, logged

    def resume_from(point, logged: int) -> tuple[Path | None, int, bool]:
        """Rank 0: load the checkpoint and make the run directory match it; (checkpoint, step,
        whether the step's validation is still to run)."""
        start = 0
        if point is not None:
            if point.checkpoint is not None:  # refuse before anything in the run directory changes
                for diff in check_resume(checkpoint_fingerprint(point.checkpoint), fingerprint, force=force):
                    warnings.warn(f"--force: resuming although {diff}", stacklevel=2)
                start = load_checkpoint(point.checkpoint, stack.models_by_adapter(), stack.optims,
                                        stack.routing.adapters)
            if point.damaged_newer:
                dest = set_aside(run.path, point, (run.metrics, run.samples, run.val_samples))
                notify(f"moved damaged {', '.join(p.name for p, _ in point.damaged_newer)} to {dest} "
                       f"(with a copy of metrics and samples as they were); resuming from step {start}")
            if logged > start:
                notify(f"resuming from step {start}: steps {start + 1}-{logged}, logged after that checkpoint, "
                       "are run again")
            discard_partial(run.path, newer_than=start)  # a killed save's temp dirs, a crashed run's later steps
            run.truncate_after(start)
        if start >= cfg.train.steps:
            notify(f"the run is already at step {start} of train.steps={cfg.train.steps}: nothing to train "
                   "(pass --steps N to go further)")
        run.write_fingerprint(fingerprint)  # every checkpoint of this run embeds it
        kept = run.rows()  # after truncation: what the run keeps
        validate_first = val_due(start) and not any(r["step"] == start and "val/accuracy" in r for r in kept)
        return (point.checkpoint if point is not None else None), start, validate_first

    point, logged = _on_lead(dp, check_run_dir)
    stack = build_stack(cfg)
    # train.threads 0: a fair share of the cores among the training runs on this machine
    share = cpu_share_or_none(cfg.train.threads)
    try:
        fingerprint = run_fingerprint(cfg, stack)
        ckpt, start, validate_first = _on_lead(dp, lambda: resume_from(point, logged))
        if not lead and ckpt is not None:  # rank 0 checked and loaded it; the others load the same
            load_checkpoint(ckpt, stack.models_by_adapter(), stack.optims, stack.routing.adapters)
        if lead:
            # Built once the resume point is known: TensorBoard hides what a crashed process logged
            # past it, W&B continues the same run id.
            sinks = build_sinks(cfg.train.sinks, run.path, project=cfg.train.wandb_project,
                                mode=cfg.train.wandb_mode, config=cfg.model_dump(mode="json"),
                                resume_step=start if resume else None)
            if cfg.alarms.enabled and cfg.train.diagnostics == "full":  # the monitor replays what the run keeps
                monitor = build_monitor(cfg, stack.routing)
                monitor.restore(run.rows())
        if validate_first:
            validation(start)  # also the one a stop on a signal skipped
        skipped, nonfinite = 0, NonFiniteStreak(cfg.train.max_nonfinite_steps)
        saved_at, requested = start, False
        for step in range(start + 1, cfg.train.steps + 1):
            requested = stopping()
            if requested:
                break
            if share is not None:
                row_threads = share.apply()  # another run may have started or ended
            row, episodes = train_step(stack, step)
            if share is not None:
                row["time/threads"] = row_threads
            emit("step", row)
            if lead:
                run.log_samples(step, episodes, cfg.train.samples_per_step)
            skipped = skipped + 1 if row.get("skipped/unscorable") else 0
            halt: RuntimeError | None = nonfinite.observe(step, row)  # the more specific cause first
            if halt is None and skipped >= cfg.reward.max_skipped_steps:
                statuses = {k.removeprefix("reward/status_"): round(v, 3) for k, v in row.items() if k.startswith("reward/status_")}
                halt = VerifierFailure(
                    f"halted at step {step}: {skipped} steps in a row skipped because more than "
                    f"{cfg.reward.max_unscorable_frac:.0%} of episodes were unscorable (the {cfg.reward.name} verifier "
                    f"is failing; last step's statuses {statuses}). A checkpoint of step {step} was saved; "
                    f"see samples.jsonl, fix the verifier or data, then --resume.")
            if halt is not None:
                # Skipped and non-finite updates changed no weight: the saved state is sound.
                save(step)
                raise halt
            requested = stopping()
            late = out_of_time() and step < cfg.train.steps
            if (val_due(step) or late) and not requested:  # a stop skips it; the resume runs it
                validation(step)
                requested = stopping()  # a signal during the validation still saves this step
            if step % cfg.train.checkpoint_every == 0 or step == cfg.train.steps or requested or late:
                save(step)
                saved_at = step
            if late and not requested:  # a finished slice of the run, not a failure: exit 0
                if lead:
                    notify(f"train.max_minutes={cfg.train.max_minutes:g} reached after step {step} of "
                           f"{cfg.train.steps}: validated, checkpoint step_{step} is saved. Continue with: "
                           f"{resume_command(run.path)}")
                break
            if stop_after is not None and step >= stop_after:
                break
        if requested and saved_at < cfg.train.steps:
            # a rank that was not signalled itself stops with the others, as on SIGTERM
            signum = stop.signum or signal.SIGTERM
            ckpt = f"checkpoint step_{saved_at} is saved" if saved_at else "no step was trained, nothing to save"
            raise TrainingStopped(f"stopped by {signal.Signals(signum).name} after step {saved_at}: {ckpt}. "
                                  f"Continue with: {resume_command(run.path)}", signum, saved_at,
                                  run.path / "checkpoints" / f"step_{saved_at}" if saved_at else None)
    finally:  # a halted or failed run still flushes its sinks and stops the verifier's processes
        for sink in sinks:
            sink.close()
        stack.close()
        if share is not None:
            share.close()
        if lead:
            _summarize(run, notify)
    return run.path


def _summarize(run: RunDir, notify: Callable[[str], None]) -> None:
    """summary.json from what the run logged so far (also for a halted or failed run); a
    failure here is reported, never raised over the error that ended the run."""
    if not run.metrics.exists() or run.metrics.stat().st_size == 0:
        return  # nothing logged yet (the run failed while loading)
    try:
        write_summary(run.path)
    except Exception as e:  # noqa: BLE001 - never mask the error that ended the run
        notify(f"summary.json not written: {e}")


def build_monitor(cfg: Config, routing: Routing) -> AlarmMonitor:
    roles_by_policy: dict[str, list[str]] = {}
    for role, policy in routing.routes.items():
        if policy != BASE_POLICY:  # the frozen base is not a policy that can drift
            roles_by_policy.setdefault(policy, []).append(role)
    a = cfg.alarms
    return AlarmMonitor(roles_by_policy, AlarmThresholds(
        window=a.window, amp_ratio=a.amp_ratio, flat_ratio=a.flat_ratio, capture_closing=a.capture_closing,
        capture_move=a.capture_move, cliff_margin=a.cliff_margin))
