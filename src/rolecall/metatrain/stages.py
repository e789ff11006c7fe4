"""Training a deliberation meta-policy, in the stages of "Learning to Deliberate: Meta-policy
Collaboration for Agentic LLMs with Multi-agent Reinforcement Learning" (MPDF):

1. states: the training problems are deliberated with random actions; every agent's state at
   every round is labelled by the oracle (PERSIST when right, CONCEDE when a peer is right,
   else REFINE) from the run's verifier;
2. sft: the network is fitted to those labels (cross-entropy); the result is π_sft, the
   starting point and the frozen reference of the next stage;
3. corpus: other training problems are deliberated by π_sft (sampled), and at every state every
   action is branched and scored (reward r_local + r_global; see the deliberation workflow);
4. softrank: SoftRankPO on that offline corpus, from π_sft, checkpointed as it goes;
5. eval: the validation set is deliberated by always-PERSIST (majority vote of the first
   answers), always-REFINE, π_sft and the trained policy, and by the oracle as a ceiling.

The LLM agents stay frozen. Everything lands in the run directory: the stages' data and
checkpoints in `checkpoints/policy-<name>/` (each file written atomically, so a kill leaves
the previous state or the whole new one), metrics in metrics.jsonl under `policy/<name>/...`
(rows carry a `stage`), and `deliberation.json` with the final comparison. A resume skips
every finished stage and continues SoftRankPO from its last checkpoint: its batches are a
pure function of (seed, step), so the weights come out bit-identical to an uninterrupted run.

The stages run on the harness the trainer registry hands `rolecall.metatrain.trainer`
(`rolecall.train.harness.Harness`; this package sits above the trainers, a client of what the
harness gives it): the run directory, the resume fingerprint, metrics rows, the stop request, and the
episodes, played in the trainer's process or on the Ray rollout actors (`rollout.actors`). On
actors each share of the problems is deliberated by the actor's copy of the stage's
deliberator (sent with the share), and the counterfactual branches of the corpus run there too;
the network's own training (sft, softrank) runs in the trainer's process.
"""
from __future__ import annotations

import copy
import hashlib
import json
import random
import time
from pathlib import Path
from statistics import fmean
from typing import TYPE_CHECKING

import torch

from rolecall.errors import UserError
from rolecall.fsio import write_durable
from rolecall.metapolicy.checkpoint import read_checkpoint, save_checkpoint
from rolecall.metapolicy.corpus import collate
from rolecall.metapolicy.decider import MetaDeliberator
from rolecall.metapolicy.network import MetaPolicy
from rolecall.metapolicy.rules import FixedDeliberator, OracleDeliberator, RandomDeliberator, oracle_actions
from rolecall.metapolicy.state import ACTIONS, CONCEDE, PERSIST, REFINE
from rolecall.metapolicy.train import fit, sft_loss, softrank_objective
from rolecall.types import Episode, Problem

if TYPE_CHECKING:  # annotations only
    from rolecall.schema import Config
    from rolecall.train.harness import Harness

STAGES = ("states", "sft", "corpus", "softrank", "eval")


class MetaPolicyResumeRefused(UserError, RuntimeError):
    """--resume of a meta-policy run whose settings or inputs changed."""


def _problems(train_P: list[Problem], seed: int, start: int, n: int) -> list[Problem]:
    """n training problems from a seeded shuffle, from position `start` (stages use disjoint slices)."""
    order = list(range(len(train_P)))
    random.Random(seed).shuffle(order)
    return [train_P[order[(start + i) % len(order)]] for i in range(n)]


class MetaPolicyRun:
    def __init__(self, cfg: "Config", host: "Harness", fingerprint: str, force: bool = False) -> None:
        self.cfg, self.mp, self.host = cfg, cfg.metapolicy, host
        self.fingerprint, self.force = fingerprint, force  # checkpoints carry the fingerprint; a resume checks it
        self.folder = host.path / "checkpoints" / f"policy-{self.mp.name}"
        self.prefix = f"policy/{self.mp.name}"

    # -- files ----------------------------------------------------------------------------------

    def path(self, name: str) -> Path:
        return self.folder / name

    def _save_json(self, name: str, data) -> None:
        payload = json.dumps(data, separators=(",", ":")).encode()
        body = json.dumps({"sha256": hashlib.sha256(payload).hexdigest(), "data": data}, separators=(",", ":"))
        self.folder.mkdir(parents=True, exist_ok=True)
        write_durable(self.path(name), body.encode())

    def _load_json(self, name: str):
        path = self.path(name)
        try:
            body = json.loads(path.read_text())
            payload = json.dumps(body["data"], separators=(",", ":")).encode()
            ok = hashlib.sha256(payload).hexdigest() == body["sha256"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path} is damaged ({type(e).__name__}: {e}); delete it to redo that stage") from None
        if not ok:
            raise ValueError(f"{path} is damaged (its contents do not match their SHA-256); delete it to redo that stage")
        return body["data"]

    def _read(self, name: str) -> dict:
        """A checkpoint of this run's stages; one written for other inputs or settings is refused."""
        saved = read_checkpoint(self.path(name))
        theirs = saved["extra"].get("fingerprint")
        if theirs != self.fingerprint and not self.force:
            raise MetaPolicyResumeRefused(f"{self.path(name)} was written for another run (fingerprint {theirs}, "
                                          f"this run's is {self.fingerprint}); pass --force to use it anyway")
        return saved

    def _extra(self, stage: str) -> dict:
        return {"hidden": self.mp.hidden, "heads": self.mp.heads, "stage": stage, "fingerprint": self.fingerprint}

    # -- rollouts -------------------------------------------------------------------------------

    def deliberate(self, problems: list[Problem], deliberator, *, counterfactual: bool = False,
                   seed: int) -> list[Episode]:
        """The problems deliberated (one episode each, scored) with `deliberator` deciding."""
        self.host.set_workflow(deliberator=deliberator, counterfactual=counterfactual)
        return self.host.play(problems, seed)

    def new_policy(self) -> MetaPolicy:
        torch.manual_seed(self.mp.seed)
        return MetaPolicy(hidden=self.mp.hidden, heads=self.mp.heads)

    # -- stages ---------------------------------------------------------------------------------

    def states(self) -> dict:
        if self.path("states.json").exists():
            return self._load_json("states.json")
        problems = _problems(self.host.train_P, self.mp.seed, 0, self.mp.sft_problems)
        t0 = time.time()
        with self.host.unsaved("states"):
            eps = self.deliberate(problems, RandomDeliberator(self.mp.seed), seed=self.mp.seed + 1)
        rows = labelled_states(eps, self.host.workflow.n_agents)
        if not rows:
            raise RuntimeError("no labelled state: every answer was unscorable; check the verifier and samples")
        self._save_json("states.json", rows)
        labels = [r["label"] for r in rows]
        self.host.emit("meta", {"stage": "states", "step": 0, f"{self.prefix}/states/rows": len(rows),
                                **{f"{self.prefix}/states/oracle_{a}": labels.count(k) / len(labels)
                                   for k, a in enumerate(ACTIONS)},
                                f"{self.prefix}/states/time_s": round(time.time() - t0, 2)})
        return rows

    def sft(self, rows: list[dict]) -> MetaPolicy:
        policy = self.new_policy()
        if self.path("sft.ckpt").exists():
            policy.load_state_dict(self._read("sft.ckpt")["policy"])
            return policy
        data = collate([(r["own"], r["peers"]) for r in rows], labels=[r["label"] for r in rows])
        t0 = time.time()
        result = fit(policy, sft_loss, data, epochs=self.mp.sft_epochs, batch_size=self.mp.batch_size,
                     lr=self.mp.sft_lr, seed=self.mp.seed)
        per_epoch = -(-len(data) // self.mp.batch_size)
        for e in range(self.mp.sft_epochs):
            h = result.history[e * per_epoch:(e + 1) * per_epoch]
            self.host.emit("meta", {"stage": "sft", "step": e + 1,
                                    **{f"{self.prefix}/sft/{k}": fmean(m[k] for m in h) for k in h[0]}})
        save_checkpoint(self.path("sft.ckpt"), policy, result.optimizer, result.step, self._extra("sft"))
        self.host.notify(f"meta-policy {self.mp.name}: supervised bootstrap on {len(data)} states, "
                    f"{self.mp.sft_epochs} epochs in {time.time() - t0:.1f}s")
        return policy

    def corpus(self, sft_policy: MetaPolicy) -> list[dict]:
        if self.path("corpus.json").exists():
            return self._load_json("corpus.json")
        problems = _problems(self.host.train_P, self.mp.seed, self.mp.sft_problems, self.mp.corpus_problems)
        t0 = time.time()
        with self.host.unsaved("corpus"):
            eps = self.deliberate(problems, MetaDeliberator(copy.deepcopy(sft_policy), greedy=False, seed=self.mp.seed),
                                  counterfactual=True, seed=self.mp.seed + 2)
        rows = [row for ep in eps for row in ep.info.get("deliberation_corpus", [])]
        if not rows:
            raise RuntimeError("the offline corpus is empty: no episode finished its branches")
        self._save_json("corpus.json", rows)
        best = [max(range(len(ACTIONS)), key=lambda k: r["rewards"][k]) for r in rows]
        spread = [max(r["rewards"]) > min(r["rewards"]) for r in rows]
        self.host.emit("meta", {"stage": "corpus", "step": 0, f"{self.prefix}/corpus/rows": len(rows),
                                f"{self.prefix}/corpus/informative": fmean(spread),
                                **{f"{self.prefix}/corpus/mean_reward_{a}": fmean(r["rewards"][k] for r in rows)
                                   for k, a in enumerate(ACTIONS)},
                                **{f"{self.prefix}/corpus/best_{a}": best.count(k) / len(best)
                                   for k, a in enumerate(ACTIONS)},
                                f"{self.prefix}/corpus/time_s": round(time.time() - t0, 2)})
        return rows

    def softrank(self, sft_policy: MetaPolicy, rows: list[dict]) -> MetaPolicy:
        mp = self.mp
        data = collate([(r["own"], r["peers"]) for r in rows], rewards=[r["rewards"] for r in rows])
        total = mp.epochs * -(-len(data) // mp.batch_size)
        policy, ref = copy.deepcopy(sft_policy), copy.deepcopy(sft_policy)
        for p in ref.parameters():
            p.requires_grad_(False)
        start, state = 0, None
        if self.path("softrank.ckpt").exists():
            saved = self._read("softrank.ckpt")
            policy.load_state_dict(saved["policy"])
            start, state = int(saved["step"]), saved["optimizer"]
            self.host.notify(f"meta-policy {mp.name}: SoftRankPO resumes at step {start} of {total}")
        if start >= total:
            return policy
        if start == 0:  # nothing saved yet: a resume evaluates step 0 again
            with self.host.unsaved("SoftRankPO (its step-0 evaluation)"):
                self.evaluate_policy(policy, 0)

        def on_step(step: int, pol, optimizer, metrics: dict) -> bool:
            self.host.emit("meta", {"stage": "softrank", "step": step,
                                    **{f"{self.prefix}/softrank/{k}": v for k, v in metrics.items()}})
            self.host.emit("progress", {"stage": "softrank", "done": step, "total": total})
            if step % mp.checkpoint_every == 0 or step == total or self.host.stop.requested:
                save_checkpoint(self.path("softrank.ckpt"), pol, optimizer, step, self._extra("softrank"))
            if step % mp.eval_every == 0 and step != total:
                self.evaluate_policy(pol, step)
            if self.host.stop.requested:
                raise self.host.stopped(f"stopped by {self.host.stop.name} at SoftRankPO step {step}: its state is "
                                        f"saved. Continue with: rolecall train --resume {self.host.path}",
                                        step, self.path("softrank.ckpt"))
            return False

        fit(policy, softrank_objective(ref, mp.tau, mp.beta, mp.lam), data, epochs=mp.epochs,
            batch_size=mp.batch_size, lr=mp.lr, seed=mp.seed, start_step=start, state=state, on_step=on_step)
        return policy

    def evaluate_policy(self, policy: MetaPolicy, step: int) -> dict:
        """Validation deliberated by the policy (greedy): accuracy and action rates per round."""
        m = self.validation(MetaDeliberator(copy.deepcopy(policy), greedy=True))
        self.host.emit("meta", {"stage": "softrank_eval", "step": step,
                                **{f"{self.prefix}/val/{k}": v for k, v in m.items()}})
        return m

    def validation(self, deliberator) -> dict:
        eps = self.deliberate(self.host.val_P, deliberator, seed=self.cfg.train.seed + 10_007)
        m = {k.removeprefix("deliberation/"): v for k, v in self.host.workflow.metrics(eps).items()}
        m["accuracy"] = fmean(1.0 if ep.reward is not None and ep.reward >= 0.5 else 0.0 for ep in eps)
        return m

    def evaluate(self, sft_policy: MetaPolicy, trained: MetaPolicy) -> dict:
        arms = {"persist": FixedDeliberator(PERSIST), "refine": FixedDeliberator(REFINE),
                "concede": FixedDeliberator(CONCEDE), "sft": MetaDeliberator(copy.deepcopy(sft_policy)),
                "trained": MetaDeliberator(copy.deepcopy(trained)), "oracle": OracleDeliberator()}
        results = {}
        for name, deliberator in arms.items():
            with self.host.unsaved("eval"):  # its report is written once every arm is in
                results[name] = self.validation(deliberator)
            self.host.emit("meta", {"stage": "eval", "step": 0, "arm": name,
                                    **{f"{self.prefix}/eval/{name}/{k}": v for k, v in results[name].items()}})
        return results


def labelled_states(episodes: list[Episode], n_agents: int) -> list[dict]:
    """One row per (episode, round, agent) decision: the agent's features and the oracle's action.

    The answers graded under `answers` are laid out table by table (round 0 first), so the
    table an agent decided from is `answers[t * n : (t + 1) * n]`. A table with an unscorable
    answer gives no rows (the oracle would be guessing).
    """
    rows = []
    for ep in episodes:
        log = ep.info.get("deliberation")
        grades = ep.grades("answers")
        if not log:
            continue
        for t, feats in enumerate(log["features"]):
            table = grades[t * n_agents:(t + 1) * n_agents]
            if len(table) != n_agents or any(g is None for g in table):
                continue
            labels = oracle_actions([g >= 0.5 for g in table])
            rows += [{"round": t, "own": own, "peers": peers, "label": label}
                     for (own, peers), label in zip(feats, labels)]
    return rows



def train_metapolicy(cfg: "Config", host: "Harness") -> dict:
    """The five stages of the module docstring, skipping those a resumed run already finished."""
    fingerprint = host.begin({"metapolicy": cfg.metapolicy.model_dump(mode="json")}, refused=MetaPolicyResumeRefused)
    if host.actors:
        host.notify(f"meta-policy {cfg.metapolicy.name}: episodes on {host.actors} Ray rollout actors")
    job = MetaPolicyRun(cfg, host, fingerprint, host.force)
    host.resumes_at(*_drop_unfinished(host, job))
    rows = job.states()
    sft_policy = job.sft(rows)
    corpus = job.corpus(sft_policy)
    trained = job.softrank(sft_policy, corpus)
    optimizer = torch.optim.AdamW(trained.parameters())
    save_checkpoint(job.path("final.ckpt"), trained, optimizer, 0, job._extra("final"))
    results = job.evaluate(sft_policy, trained)
    report = {"policy": cfg.metapolicy.name, "states": len(rows), "corpus": len(corpus),
              "checkpoints": {"sft": str(job.path("sft.ckpt")), "trained": str(job.path("final.ckpt"))},
              "validation": results}
    write_durable(host.path / "deliberation.json", json.dumps(report, indent=1).encode())
    accs = ", ".join(f"{k} {v['accuracy']:.3f}" for k, v in results.items())
    host.notify(f"meta-policy {cfg.metapolicy.name}: validation accuracy {accs}")
    return report


def _drop_unfinished(host: "Harness", job: MetaPolicyRun) -> tuple[int, str]:
    """Forget what a killed run logged for stages it must redo, and SoftRankPO steps past its
    checkpoint. Returns where the run goes on: (step, stage)."""
    done = {"states": job.path("states.json").exists(), "sft": job.path("sft.ckpt").exists(),
            "corpus": job.path("corpus.json").exists()}
    at = int(job._read("softrank.ckpt")["step"]) if job.path("softrank.ckpt").exists() else 0

    def keep(row: dict) -> bool:
        stage = row.get("stage")
        if stage in done:
            return done[stage]
        if stage in ("softrank", "softrank_eval"):
            return at > 0 and row["step"] <= at
        return stage != "eval"

    host.keep_rows(keep)
    if job.path("final.ckpt").exists():
        return 0, "eval"
    if done["corpus"]:
        return at, "softrank"
    return 0, next(stage for stage in STAGES if not done[stage])  # states, sft or corpus
