"""Rollout workers on Ray: N actors, each holding the run's base models and an engine, play the
workflow on a share of a step's problems while the trainer keeps the optimizers.

Before each rollout the trainer publishes every adapter's current weights under a new version
number; an actor answers a rollout only at the version it was just given, so it never samples
from stale weights. The problems are split into contiguous shares and each episode keeps its
draw index, and sampling is seeded per request (`GenRequest.seed`), so the episodes are the
ones an in-process rollout with the same seed produces, however many actors there are. An
actor that dies is replaced and its share retried, at most `retries` times; then the step
fails with an error naming the worker, and nothing already in the run directory is touched.
"""
from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
from dataclasses import dataclass

import torch

from rolecall.compose.bases import adapter_models, team_engine
from rolecall.compose.parts import build_parts
from rolecall.algo.ranks import share_bounds
from rolecall.errors import UserError
from rolecall.rewards.verifier import as_check
from rolecall.rollout import rollout
from rolecall.schema import Config

# Switches the actors read from the environment: the driver's values go to every actor.
_SHORT_TMP = "/tmp" if os.path.isdir("/tmp") else None
PASSED_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "PYTHONPATH", "OMP_NUM_THREADS", "ROLECALL_CACHE")

class RolloutWorkerError(UserError, RuntimeError):
    """A rollout worker kept failing; the message names it and the last error."""

class _Worker:
    """The actor: the run's bases, adapters and engine, its own verifier for `team.check`."""

    def __init__(self, cfg_tree: dict, cwd: str, threads: int) -> None:
        if os.path.isdir(cwd):
            os.chdir(cwd)  # relative paths and user modules resolve as for the trainer
        torch.set_num_threads(max(1, threads))
        cfg = Config.model_validate(cfg_tree)  # the driver validated it in full before starting the actors
        self.cfg = cfg
        parts = build_parts(cfg)
        self.workflow = parts.workflow
        self.bases = parts.bases(parts.tokenizer())
        self.engine = team_engine(self.bases, cfg.model.path)
        self.models = adapter_models(self.bases)
        self.verifier = parts.verifier()
        self.version = -1

    def load(self, version: int, states: dict) -> int:
        from peft import set_peft_model_state_dict

        for name, state in states.items():
            set_peft_model_state_dict(self.models[name], state, adapter_name=name)
        self.version = version
        return version

    def run(self, version: int, problems: list, first_group: int, group_size: int, routes: dict,
            temperature: float, seed: int, training: bool, settings: dict | None = None) -> list:
        if version != self.version:
            raise RuntimeError(f"asked for adapter version {version}, holding {self.version}")
        for name, value in (settings or {}).items():  # what the trainer set on its own workflow (`configure`)
            setattr(self.workflow, name, value)
        cfg = self.cfg

        def budget(role: str) -> int:
            return cfg.rollout.max_new_tokens_by_role.get(role, cfg.rollout.max_new_tokens)

        return rollout(self.workflow, problems, group_size, self.engine, routes, budget, temperature,
                       episode_timeout_s=cfg.rollout.episode_timeout_s, check=as_check(self.verifier),
                       training=training, seed=seed, first_group=first_group)

@dataclass
class RayRollout:
    """The trainer's side: start `n` actors, publish adapters, split rollouts, retry dead actors."""

    cfg_tree: dict
    n: int
    address: str | None = None
    retries: int = 2
    temp_dir: str | None = None
    gpus: float = 0  # per actor; Ray then sets CUDA_VISIBLE_DEVICES, so model.device=auto finds its own

    def __post_init__(self) -> None:
        try:
            import ray
        except ImportError:
            raise RolloutWorkerError("rollout.actors needs Ray: pip install 'rolecall[ray]'") from None
        self.ray = ray
        self.started_ray, self._own_temp = False, None
        if not ray.is_initialized():
            kw: dict = dict(include_dashboard=False, log_to_driver=False, logging_level="ERROR")
            if self.address:
                kw["address"] = self.address
                env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
                kw["runtime_env"] = {"env_vars": env} if env else None
            else:
                os.environ.setdefault("RAY_AUTH_MODE", "disabled")
                kw["num_cpus"] = os.cpu_count() or 1
                # Ray's sockets live under it and a socket path may not exceed 107 bytes: keep it
                # short (under /tmp, whatever TMPDIR says), and remove it at close if it is ours
                self._own_temp = None if self.temp_dir else tempfile.mkdtemp(prefix="rc-ray-", dir=_SHORT_TMP)
                kw["_temp_dir"] = self.temp_dir or self._own_temp
            # ray.init installs its own SIGTERM/SIGINT handlers and never restores them: the
            # trainer's (save a checkpoint, then stop) must stay in place.
            saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
            try:
                ray.init(**kw)
            finally:
                if threading.current_thread() is threading.main_thread():
                    for sig, handler in saved.items():
                        if handler is not None:
                            signal.signal(sig, handler)
            self.started_ray = True
        # CPU is shared with the trainer (threads are set below); GPUs, when asked for, are the actor's own
        self._actor_cls = ray.remote(num_cpus=0, num_gpus=self.gpus)(_Worker)
        self.threads = max(1, (os.cpu_count() or 1) // self.n)
        self.actors = [self._start() for _ in range(self.n)]
        self.version, self.states_ref = -1, None
        self.settings: dict = {}
        self.settings_ref = None

    def _start(self):
        return self._actor_cls.remote(self.cfg_tree, os.getcwd(), self.threads)

    def publish(self, models_by_adapter: dict) -> None:
        """Every adapter's weights to every actor, under a new version."""
        from peft import get_peft_model_state_dict

        states = {name: {k: v.detach().cpu() for k, v in get_peft_model_state_dict(m, adapter_name=name).items()}
                  for name, m in models_by_adapter.items()}
        self.version += 1
        self.states_ref = self.ray.put(states)
        loads = [a.load.remote(self.version, self.states_ref) for a in self.actors]
        for i, ref in enumerate(loads):
            self._retrying(i, ref, lambda i=i: self.actors[i].load.remote(self.version, self.states_ref),
                           f"loading adapter version {self.version}")

    def configure(self, settings: dict) -> None:
        """Attributes every actor sets on its workflow before it plays a share: what a trainer set
        on its own workflow (e.g. an object that decides within the episode, trained by that
        trainer). They add to those given before and travel with every share, so a replaced actor
        has them too. The objects travel by pickle: the actor plays with its own copy."""
        self.settings = {**self.settings, **settings}
        self.settings_ref = self.ray.put(self.settings)

    def rollout(self, problems: list, group_size: int, routes: dict, temperature: float, seed: int,
                training: bool) -> list:
        """Episodes in the in-process order (problem-major), each share on its own actor."""
        bounds = [share_bounds(len(problems), i, self.n) for i in range(self.n)]
        shares = [(i, a, problems[a:b]) for i, (a, b) in enumerate(bounds) if a < b]
        calls = {i: self.actors[i].run.remote(self.version, share, start, group_size, routes, temperature, seed,
                                              training, self.settings_ref) for i, start, share in shares}
        out: dict[int, list] = {}
        for i, start, share in shares:
            out[i] = self._gather(i, calls[i], share, start, group_size, routes, temperature, seed, training)
        return [ep for i, _, _ in shares for ep in out[i]]

    def _gather(self, i, ref, share, start, group_size, routes, temperature, seed, training) -> list:
        again = lambda: self.actors[i].run.remote(self.version, share, start, group_size, routes,  # noqa: E731
                                                  temperature, seed, training, self.settings_ref)
        return self._retrying(i, ref, again, f"its share of {len(share)} problems")

    def _retrying(self, i: int, ref, again, what: str):
        """ray.get(ref); if actor i died, a fresh actor gets the current adapters and `again()`,
        at most `retries` times, then RolloutWorkerError."""
        ray = self.ray
        dead = (ray.exceptions.RayActorError, ray.exceptions.ActorDiedError)
        last = None
        for attempt in range(self.retries + 1):
            if ref is not None:
                try:
                    return ray.get(ref)
                except dead as e:
                    last = e
            if attempt == self.retries:
                break
            self.actors[i] = self._start()  # a fresh actor: the run's weights, then the work again
            try:
                if self.states_ref is not None:
                    ray.get(self.actors[i].load.remote(self.version, self.states_ref))
                ref = again()
            except dead as e:
                last, ref = e, None
        detail = str(last).splitlines()[0] if last is not None and str(last) else ""
        raise RolloutWorkerError(f"rollout worker {i} died {self.retries + 1} times on {what}; last error: "
                                 f"{type(last).__name__}: {detail}. The run directory is as it was after the last "
                                 "completed step; --resume continues it") from None

    def close(self) -> None:
        for a in self.actors:
            try:
                self.ray.kill(a)
            except Exception:  # noqa: BLE001 - already gone
                pass
        if self.started_ray:
            self.ray.shutdown()
        if self._own_temp:
            shutil.rmtree(self._own_temp, ignore_errors=True)
