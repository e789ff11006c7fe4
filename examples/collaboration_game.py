"""The collaboration game of "MAPoRL: Multi-Agent Post-Co-Training for Collaborative Large
Language Models with Reinforcement Learning" (section 2), learned by policy gradient.

    python examples/collaboration_game.py --out /tmp/collab                 # ~20 s on one core
    python examples/collaboration_game.py --out /tmp/collab --sensitivity   # + ~35 s of variants
    python examples/collaboration_game.py --sensitivity --record benchmarks/results/collaboration_game.json \
        --figure docs/img/collaboration_game.svg                            # the recorded result

Writes results.json and collaboration_game.svg into --out; `--record` writes the result with its
provenance (curves thinned to every 5th iteration), `--figure` the figure. numpy only.

The game (section 2.1). Two agents play T turns on a question q. Each turn each agent either
collaborates (a0) or acts independently (a1). Once the total number of a0 actions of both agents
so far reaches the threshold C(q), synergy holds and every later turn pays each agent
R_syn(q) = 1 whatever it does. Before that a turn pays R_col(q) for a0 and R_ind(q) for a1,
R_col < R_ind. Each agent maximises its own sum over the T turns.

Timing: a turn is paid by the count of the turns *before* it, so the a0s that reach C still pay
R_col and synergy starts on the next turn. With T = 2 and C = 2 this reproduces Observation 1
exactly: against a partner who collaborates with probability pi, collaborating is the best
response iff (R_syn - R_ind) pi >= R_ind - R_col (tests/test_collaboration_game.py checks it on a
grid). The paper states Observation 1 for C = 1; under these rules C = 1 gives a different
inequality, so its threshold convention is off by one from ours.

Questions. The paper's Appendix D (its C, R_col, R_ind) is not available, so we chose:
T = 10 turns, R_syn = 1, C(q) uniform on {12, 14}, R_col(q) ~ U[0.10, 0.50],
R_ind(q) = R_col(q) + U[0.10, 0.30], and keep the "hard collaborative" draws, decided by exact
dynamic programming over (turn, count) (`best_response`), never by training:
  (i)  against a partner who collaborates with probability 0.75 on every turn, the exact best
       response never collaborates. 12-14 a0s out of the 20 actions are needed; against a
       non-strategic partner at 0.5-0.75 synergy comes too late (or never) to repay the
       R_ind - R_col that every a0 costs. 0.75 rather than the paper's 0.7 leaves a margin: a
       question whose best response only just avoids at 0.7 is a near-tie, which an
       entropy-regularised learner settles at a mix;
  (ii) against a partner who always collaborates, the best response collaborates on every turn
       until synergy: mutual collaboration (6-7 turns at R_col, then 3-4 turns at 1) is an
       equilibrium and beats mutual independence (10 turns at R_ind).
Thresholds are even because with an odd one an agent can skip one a0 for free, so full mutual
collaboration is never an equilibrium. About half of the draws pass (`drawn` in the results).

Learner. A tabular softmax policy over (question, turn, count of a0s so far), the state of the
game; after synergy no action matters and none is taken. Each iteration plays `episodes`
episodes and takes, per learner, one REINFORCE step with a per-state running-mean baseline,
preconditioned by the Fisher information of each state's logit: the natural policy gradient of a
tabular softmax, under which every visited state moves by its estimated advantage of a0 over a1
however rarely it is visited. Entropy regularisation with weight tau annealed from 0.5 to 0.02
follows the tau -> 0 limit of Observation 2. Half of the training episodes start at a random
reachable (turn, count) so that every state's advantage gets estimated ("restarts"); curves and
rates are measured on episodes played from turn 0. Arms, all from 50/50 logits:
  a single learner against a fixed partner with pi in {0.5, 0.6, 0.7}, and 0.9 as a control;
  two co-trained learners, each maximising its own return.
Collaboration rate: share of a0 among a learner's decisions before synergy, per question,
averaged over questions (the pair: over both learners).

Outcome (docs/collaboration_game.md has the numbers): against pi = 0.5, 0.6 and 0.7 the single
learner learns to avoid collaboration and matches the exact best response; the co-trained pair
first drifts towards avoidance like them, then turns and collaborates on the questions whose
best response switches to collaboration at a partner pi of about 0.87 or less, and avoids on the
others. `sensitivity()` measures how much of this rests on the choices above: plain REINFORCE
instead of the natural gradient, a constant tau, no restarts, unfiltered questions, T = 20.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling, however this file is loaded
from collaboration_game_output import dumps, summary_table, write_outputs, write_svg  # noqa: E402,F401  (re-exported)

COLLABORATE, INDEPENDENT = 1, 0  # a0 and a1 of the paper


# -- the game -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Question:
    threshold: int  # C(q): total a0 count of both agents that starts synergy
    r_col: float  # pay of a0 before synergy
    r_ind: float  # pay of a1 before synergy
    r_syn: float = 1.0  # pay of every turn after synergy


def episode_rewards(q: Question, actions_a: list[int], actions_b: list[int]) -> tuple[list[float], list[float]]:
    """Per-turn rewards of both agents for given action sequences (the reference rules)."""
    count, rewards_a, rewards_b = 0, [], []
    for a, b in zip(actions_a, actions_b, strict=True):
        if count >= q.threshold:  # synergy was reached on an earlier turn
            rewards_a.append(q.r_syn)
            rewards_b.append(q.r_syn)
            continue
        rewards_a.append(q.r_col if a == COLLABORATE else q.r_ind)
        rewards_b.append(q.r_col if b == COLLABORATE else q.r_ind)
        count += (a == COLLABORATE) + (b == COLLABORATE)
    return rewards_a, rewards_b


# -- exact analysis -------------------------------------------------------------------------------
@dataclass
class BestResponse:
    value: np.ndarray  # (T+1, C+2): best achievable return from (turn, count); count >= C is synergy
    collaborate: np.ndarray  # (T, C) bool: the best action at (turn, count) before synergy


def _as_table(partner: float | np.ndarray, turns: int, threshold: int) -> np.ndarray:
    """The partner's a0 probability per (turn, count): a constant pi or a learned table."""
    return np.broadcast_to(np.asarray(partner, dtype=float), (turns, threshold))


def _stage(q: Question, partner_t: np.ndarray, next_value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q(a0) and Q(a1) at one turn for every count below C, given the next turn's values (whose
    columns C and C+1 hold the synergy value) and the partner's a0 probability per count."""
    ks = np.arange(q.threshold)
    q_col = q.r_col + partner_t * next_value[ks + 2] + (1 - partner_t) * next_value[ks + 1]
    q_ind = q.r_ind + partner_t * next_value[ks + 1] + (1 - partner_t) * next_value[ks]
    return q_col, q_ind


def best_response(q: Question, turns: int, partner: float | np.ndarray) -> BestResponse:
    """Backward induction over (turn, count) against a partner that does not adapt."""
    c = q.threshold
    pb = _as_table(partner, turns, c)
    value = np.zeros((turns + 1, c + 2))
    collaborate = np.zeros((turns, c), dtype=bool)
    for t in range(turns - 1, -1, -1):
        value[t, c:] = (turns - t) * q.r_syn
        q_col, q_ind = _stage(q, pb[t], value[t + 1])
        collaborate[t] = q_col >= q_ind - 1e-12  # ties collaborate, as Observation 1's ">="
        value[t, :c] = np.maximum(q_col, q_ind)
    return BestResponse(value, collaborate)


def action_values(q: Question, turns: int, probs_me: np.ndarray,
                  partner: float | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact Q(a0) and Q(a1) per (turn, count) when both sides keep playing their tables."""
    c = q.threshold
    pa, pb = _as_table(probs_me, turns, c), _as_table(partner, turns, c)
    value = np.zeros((turns + 1, c + 2))
    q_col, q_ind = np.zeros((turns, c)), np.zeros((turns, c))
    for t in range(turns - 1, -1, -1):
        value[t, c:] = (turns - t) * q.r_syn
        q_col[t], q_ind[t] = _stage(q, pb[t], value[t + 1])
        value[t, :c] = pa[t] * q_col[t] + (1 - pa[t]) * q_ind[t]
    return q_col, q_ind


@dataclass
class Evaluation:
    return_a: float
    return_b: float
    collab_rate_a: float  # expected a0 decisions / expected decisions before synergy
    collab_rate_b: float
    synergy_prob: float  # probability that synergy is reached within the T turns


def evaluate(q: Question, turns: int, probs_a: float | np.ndarray, probs_b: float | np.ndarray) -> Evaluation:
    """Exact expectations for two policies given as a0 probabilities per (turn, count)."""
    c = q.threshold
    pa, pb = _as_table(probs_a, turns, c), _as_table(probs_b, turns, c)
    dist = np.zeros(c + 2)
    dist[0] = 1.0
    ks = np.arange(c)
    ret_a = ret_b = decisions = col_a = col_b = 0.0
    for t in range(turns):
        live = dist[:c]
        synergy = dist[c:].sum()
        decisions += live.sum()
        col_a += (live * pa[t]).sum()
        col_b += (live * pb[t]).sum()
        ret_a += (live * (pa[t] * q.r_col + (1 - pa[t]) * q.r_ind)).sum() + synergy * q.r_syn
        ret_b += (live * (pb[t] * q.r_col + (1 - pb[t]) * q.r_ind)).sum() + synergy * q.r_syn
        nxt = np.zeros(c + 2)
        nxt[c] = synergy
        np.add.at(nxt, np.minimum(ks + 2, c), live * pa[t] * pb[t])
        np.add.at(nxt, np.minimum(ks + 1, c), live * (pa[t] * (1 - pb[t]) + (1 - pa[t]) * pb[t]))
        np.add.at(nxt, ks, live * (1 - pa[t]) * (1 - pb[t]))
        dist = nxt
    denom = max(decisions, 1e-12)
    return Evaluation(float(ret_a), float(ret_b), float(col_a / denom), float(col_b / denom), float(dist[c:].sum()))


def best_response_rate(q: Question, turns: int, partner_pi: float) -> float:
    """Collaboration rate of the exact best response on its own path against a fixed pi."""
    br = best_response(q, turns, partner_pi)
    return evaluate(q, turns, br.collaborate.astype(float), partner_pi).collab_rate_a


def switch_point(q: Question, turns: int, grid: int = 100) -> float | None:
    """The smallest partner pi (on a 1/grid grid) at which the best response mostly collaborates."""
    for i in range(grid + 1):
        if best_response_rate(q, turns, i / grid) > 0.5:
            return i / grid
    return None


def needs_committed_partner(q: Question, turns: int, hard_pi: float) -> bool:
    """The filter: avoid against pi = hard_pi, collaborate against a partner who always does."""
    return bool(best_response_rate(q, turns, hard_pi) < 1e-9 and best_response_rate(q, turns, 1.0) > 1 - 1e-9)


@dataclass(frozen=True)
class GameSpec:
    turns: int = 10
    n_questions: int = 8
    thresholds: tuple[int, ...] = (12, 14)
    r_col_range: tuple[float, float] = (0.10, 0.50)
    gap_range: tuple[float, float] = (0.10, 0.30)  # R_ind - R_col
    hard_pi: float = 0.75  # filter (i): the best response to this partner never collaborates
    filtered: bool = True
    question_seed: int = 0


def sample_questions(game: GameSpec) -> tuple[list[Question], int]:
    """Draw questions from the ranges, keeping the hard collaborative ones; returns (kept, drawn)."""
    rng = np.random.default_rng(game.question_seed)
    kept: list[Question] = []
    drawn = 0
    while len(kept) < game.n_questions:
        drawn += 1
        if drawn > 100_000:
            raise ValueError("no question in these ranges passes the filter")
        r_col = round(float(rng.uniform(*game.r_col_range)), 3)
        q = Question(threshold=int(rng.choice(game.thresholds)), r_col=r_col,
                     r_ind=round(r_col + float(rng.uniform(*game.gap_range)), 3))
        if not game.filtered or needs_committed_partner(q, game.turns, game.hard_pi):
            kept.append(q)
    return kept, drawn


# -- learning -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LearnerSpec:
    iterations: int = 300
    episodes: int = 2048  # per iteration, questions drawn uniformly
    step_size: float = 0.3
    tau_start: float = 0.5  # entropy weight, annealed geometrically ...
    tau_end: float = 0.02  # ... to this over the first anneal_fraction of the iterations
    anneal_fraction: float = 0.75
    baseline_rate: float = 0.2  # running-mean rate of the per-state baseline
    fisher_damping: float = 0.01  # keeps a state seen once with p near 0 or 1 from a huge step
    natural: bool = True  # False: plain REINFORCE (gradient of the mean return per episode)
    plain_step_size: float = 100.0  # plain REINFORCE: its per-episode gradients are far smaller; at
    # 100 a single learner reaches its exact best response within the same 300 iterations
    restart: float = 0.5  # share of training episodes started at a random reachable (turn, count)
    max_logit: float = 12.0


def entropy_weight(spec: LearnerSpec, iteration: int) -> float:
    frac = min(1.0, iteration / max(1.0, spec.anneal_fraction * (spec.iterations - 1)))
    return spec.tau_start * (spec.tau_end / spec.tau_start) ** frac


class Tables:
    """Per-question game constants, indexed by episode, and the flat (question, turn, count) state index."""

    def __init__(self, questions: list[Question], turns: int):
        self.turns = turns
        self.max_threshold = max(q.threshold for q in questions)
        self.threshold = np.array([q.threshold for q in questions])
        self.r_col = np.array([q.r_col for q in questions])
        self.r_ind = np.array([q.r_ind for q in questions])
        self.r_syn = np.array([q.r_syn for q in questions])
        self.n_states = len(questions) * turns * self.max_threshold

    def state(self, question: np.ndarray, t: int, count: np.ndarray) -> np.ndarray:
        k = np.minimum(count, self.threshold[question] - 1)  # synergy states are never queried
        return (question * self.turns + t) * self.max_threshold + k

    def probs(self, logits: np.ndarray, question_index: int) -> np.ndarray:
        """a0 probabilities of one question as a (turn, count) table."""
        c = self.threshold[question_index]
        per_q = logits.reshape(-1, self.turns, self.max_threshold)[question_index, :, :c]
        return 1 / (1 + np.exp(-per_q))


@dataclass
class Batch:
    states: np.ndarray  # (T, B) state index of each decision
    live: np.ndarray  # (T, B) before synergy: a decision was taken
    actions: list[np.ndarray]  # per learner: (T, B) 1 = a0
    probs: list[np.ndarray]  # per learner: (T, B) a0 probability when acting
    returns: list[np.ndarray]  # per learner: (T, B) reward-to-go from each turn
    question: np.ndarray  # (B,) question index of each episode
    synergy: np.ndarray  # (B,) reached within the T turns
    from_start: np.ndarray  # (B,) began at turn 0 with count 0: the episodes that measure the policy


def rollout(tables: Tables, logits: list[np.ndarray], partner_pi: float | None, episodes: int,
            rng: np.random.Generator, restart: float = 0.0) -> Batch:
    """Play a batch; learner 0 vs a fixed-pi partner, or learner 0 vs learner 1."""
    turns = tables.turns
    question = rng.integers(0, len(tables.threshold), episodes)
    # Restarts: some episodes begin at a random turn with a random count reachable by then, so
    # every state's advantage is estimated, not only those the current policies reach.
    start = np.where(rng.random(episodes) < restart, rng.integers(0, turns, episodes), 0)
    reachable = np.minimum(2 * start, tables.threshold[question] - 1)
    count = np.floor(rng.random(episodes) * (reachable + 1)).astype(int)
    states = np.zeros((turns, episodes), dtype=int)
    live = np.zeros((turns, episodes), dtype=bool)
    actions = [np.zeros((turns, episodes)) for _ in logits]
    probs = [np.zeros((turns, episodes)) for _ in logits]
    rewards = [np.zeros((turns, episodes)) for _ in logits]
    for t in range(turns):
        started = t >= start
        live[t] = started & (count < tables.threshold[question])
        states[t] = tables.state(question, t, count)
        uniforms = rng.random((2, episodes))  # drawn for every episode so runs stay reproducible
        p_partner = np.full(episodes, partner_pi) if partner_pi is not None else None
        acted = []
        for i, table in enumerate(logits):
            p = 1 / (1 + np.exp(-table[states[t]]))
            probs[i][t] = p
            acted.append(uniforms[i] < p)
        if p_partner is not None:
            acted.append(uniforms[1] < p_partner)
        for i in range(len(logits)):
            actions[i][t] = acted[i]
            pay = np.where(acted[i], tables.r_col[question], tables.r_ind[question])
            rewards[i][t] = np.where(live[t], pay, np.where(started, tables.r_syn[question], 0.0))
        count = count + np.where(live[t], acted[0].astype(int) + acted[1].astype(int), 0)
    returns = [r[::-1].cumsum(axis=0)[::-1] for r in rewards]
    return Batch(states, live, actions, probs, returns, question, count >= tables.threshold[question], start == 0)


def update(logits: np.ndarray, baseline: np.ndarray, batch: Batch, learner: int, tau: float,
           spec: LearnerSpec) -> None:
    """One entropy-regularised policy-gradient step of one learner, in place."""
    live = batch.live.ravel()
    s = batch.states.ravel()[live]
    g = batch.returns[learner].ravel()[live]
    a = batch.actions[learner].ravel()[live]
    p_taken = batch.probs[learner].ravel()[live]
    n_states = logits.size
    visits = np.bincount(s, minlength=n_states).astype(float)
    seen = visits > 0
    # REINFORCE with baseline: E[(G - b)(1[a0] - p)] = p (1 - p) (Q(a0) - Q(a1)) at each state.
    score = np.bincount(s, (g - baseline[s]) * (a - p_taken), minlength=n_states)
    p = 1 / (1 + np.exp(-logits))
    if spec.natural:
        # Fisher preconditioning: the score sum divided by visits * p (1 - p) estimates the
        # advantage Q(a0) - Q(a1) itself, so a rarely visited state moves as far as a common one.
        advantage = score / (visits * p * (1 - p) + spec.fisher_damping)
        # Entropy-regularised natural step (Cen et al. 2021): the entropy term decays the logit.
        logits[seen] = (1 - spec.step_size * tau) * logits[seen] + spec.step_size * advantage[seen]
    else:
        episodes = batch.live.shape[1]
        entropy_grad = -visits * p * (1 - p) * logits  # d/dlogit of the visit-weighted entropy
        logits += spec.plain_step_size * (score + tau * entropy_grad) / episodes
    np.clip(logits, -spec.max_logit, spec.max_logit, out=logits)
    mean_return = np.bincount(s, g, minlength=n_states)[seen] / visits[seen]
    baseline[seen] += spec.baseline_rate * (mean_return - baseline[seen])


@dataclass
class Run:
    collab_rate: list[float]  # per iteration, sampled: a0 share of the learners' decisions
    mean_return: list[float]  # per iteration, per learner, averaged over learners
    synergy_rate: list[float]  # per iteration: share of episodes that reach synergy
    logits: list[np.ndarray]  # final tables, one per learner


def question_rate(batch: Batch, actions: np.ndarray, n_questions: int) -> float:
    """a0 share of the decisions of episodes played from the start, per question, averaged over
    questions (weighting by decisions would under-count questions that reach synergy early)."""
    live = batch.live & batch.from_start[None, :]
    q = np.broadcast_to(batch.question, live.shape)[live]
    decisions = np.bincount(q, minlength=n_questions)
    collaborations = np.bincount(q, actions[live], minlength=n_questions)
    asked = decisions > 0
    return float((collaborations[asked] / decisions[asked]).mean())


def train(questions: list[Question], turns: int, partner_pi: float | None, seed: int,
          spec: LearnerSpec) -> Run:
    """A single learner against a fixed pi, or (partner_pi None) two co-trained learners."""
    rng = np.random.default_rng(seed)
    tables = Tables(questions, turns)
    n_learners = 1 if partner_pi is not None else 2
    logits = [np.zeros(tables.n_states) for _ in range(n_learners)]  # the same 50/50 start
    baselines = [np.zeros(tables.n_states) for _ in range(n_learners)]
    run = Run([], [], [], logits)
    for it in range(spec.iterations):
        batch = rollout(tables, logits, partner_pi, spec.episodes, rng, spec.restart)
        real = batch.from_start
        run.collab_rate.append(float(np.mean([question_rate(batch, act, len(questions)) for act in batch.actions])))
        run.mean_return.append(float(np.mean([ret[0][real].mean() for ret in batch.returns])))
        run.synergy_rate.append(float(batch.synergy[real].mean()))
        tau = entropy_weight(spec, it)
        for i in range(n_learners):
            update(logits[i], baselines[i], batch, i, tau, spec)
    return run


def exact_outcome(questions: list[Question], turns: int, run: Run, partner_pi: float | None) -> list[Evaluation]:
    """Exact expectations of the final policies, per question."""
    tables = Tables(questions, turns)
    out = []
    for i, q in enumerate(questions):
        pa = tables.probs(run.logits[0], i)
        pb = tables.probs(run.logits[1], i) if partner_pi is None else partner_pi
        out.append(evaluate(q, turns, pa, pb))
    return out


def train_expected(q: Question, turns: int, partner_pi: float | None, spec: LearnerSpec) -> np.ndarray:
    """The infinite-sample limit of `train` with full restarts: every state moves by its exact
    advantage each iteration. The pair starts equal and stays equal, so one table plays both."""
    logits = np.zeros((turns, q.threshold))
    for it in range(spec.iterations):
        probs = 1 / (1 + np.exp(-logits))
        q_col, q_ind = action_values(q, turns, probs, probs if partner_pi is None else partner_pi)
        tau = entropy_weight(spec, it)
        logits = np.clip((1 - spec.step_size * tau) * logits + spec.step_size * (q_col - q_ind),
                         -spec.max_logit, spec.max_logit)
    return 1 / (1 + np.exp(-logits))


def expected_rates(questions: list[Question], turns: int, partner_pi: float | None, spec: LearnerSpec) -> list[float]:
    rates = []
    for q in questions:
        probs = train_expected(q, turns, partner_pi, spec)
        rates.append(round(evaluate(q, turns, probs, probs if partner_pi is None else partner_pi).collab_rate_a, 4))
    return rates


# -- the experiment -------------------------------------------------------------------------------
def arm_name(partner_pi: float | None) -> str:
    return "co-trained pair" if partner_pi is None else f"single vs pi={partner_pi:g}"


def _spread(values: list[float]) -> dict:
    arr = np.asarray(values, dtype=float)
    return {"mean": round(float(arr.mean()), 4), "std": round(float(arr.std()), 4),
            "min": round(float(arr.min()), 4), "max": round(float(arr.max()), 4),
            "per_seed": [round(float(v), 4) for v in arr]}


def _band(curves: list[list[float]]) -> dict:
    arr = np.asarray(curves)
    return {"mean": np.round(arr.mean(0), 4).tolist(), "min": np.round(arr.min(0), 4).tolist(),
            "max": np.round(arr.max(0), 4).tolist()}


def run_arm(questions: list[Question], turns: int, partner_pi: float | None, seeds: list[int],
            spec: LearnerSpec, tail: int = 20) -> dict:
    """One arm over several seeds: curves with their spread, final rates sampled and exact."""
    runs = [train(questions, turns, partner_pi, seed, spec) for seed in seeds]
    exact = [exact_outcome(questions, turns, r, partner_pi) for r in runs]

    def learner_rate(e: Evaluation) -> float:  # the pair counts both learners
        return e.collab_rate_a if partner_pi is not None else (e.collab_rate_a + e.collab_rate_b) / 2

    def exact_rate(evals: list[Evaluation]) -> float:
        return float(np.mean([learner_rate(e) for e in evals]))

    per_question = [float(np.mean([learner_rate(ev[i]) for ev in exact])) for i in range(len(questions))]
    return {
        "partner_pi": partner_pi,
        "curves": {"collab_rate": _band([r.collab_rate for r in runs]),
                   "mean_return": _band([r.mean_return for r in runs]),
                   "synergy_rate": _band([r.synergy_rate for r in runs])},
        "final": {
            # sampled: mean of the last `tail` iterations, as the plot shows them
            "collab_rate_sampled": _spread([np.mean(r.collab_rate[-tail:]) for r in runs]),
            "mean_return_sampled": _spread([np.mean(r.mean_return[-tail:]) for r in runs]),
            # exact: expectation of the final policies, questions weighted equally
            "collab_rate_exact": _spread([exact_rate(ev) for ev in exact]),
            "return_exact": _spread([np.mean([e.return_a for e in ev]) for ev in exact]),
            "synergy_prob_exact": _spread([np.mean([e.synergy_prob for e in ev]) for ev in exact]),
            "collab_rate_exact_per_question": [round(v, 4) for v in per_question],
        },
        "_runs": runs,  # dropped before writing JSON; kept for the best-response check
    }


def best_response_check(questions: list[Question], turns: int, arm: dict) -> dict:
    """Does the learned single-agent policy match the exact best response to its partner?"""
    pi = arm["partner_pi"]
    br = [best_response(q, turns, pi) for q in questions]
    br_value = [b.value[0, 0] for b in br]
    br_rate = [evaluate(q, turns, b.collaborate.astype(float), pi).collab_rate_a for q, b in zip(questions, br)]
    gaps, rate_diffs = [], []
    for run in arm["_runs"]:
        evals = exact_outcome(questions, turns, run, pi)
        gaps.append(max(v - e.return_a for v, e in zip(br_value, evals)))
        rate_diffs.append(max(abs(r - e.collab_rate_a) for r, e in zip(br_rate, evals)))
    return {"partner_pi": pi,
            "best_response_return": [round(v, 4) for v in br_value],
            "best_response_collab_rate": [round(v, 4) for v in br_rate],
            "max_return_gap_to_best_response": round(max(gaps), 4),  # worst question, worst seed
            "max_collab_rate_diff_to_best_response": round(max(rate_diffs), 4)}


def describe_questions(questions: list[Question], turns: int) -> list[dict]:
    rows = []
    for q in questions:
        always = evaluate(q, turns, 1.0, 1.0).return_a
        rows.append({**asdict(q), "switch_pi": switch_point(q, turns),
                     "mutual_collaboration_return": round(always, 4),
                     "mutual_independence_return": round(turns * q.r_ind, 4)})
    return rows


def run_experiment(game: GameSpec, spec: LearnerSpec, seeds: list[int],
                   partner_pis: tuple[float, ...] = (0.5, 0.6, 0.7), control_pis: tuple[float, ...] = (0.9,)) -> dict:
    t0 = time.time()
    questions, drawn = sample_questions(game)
    arms = {arm_name(pi): run_arm(questions, game.turns, pi, seeds, spec) for pi in (*partner_pis, *control_pis, None)}
    checks = {name: best_response_check(questions, game.turns, arm) for name, arm in arms.items()
              if arm["partner_pi"] is not None}
    for arm in arms.values():
        arm.pop("_runs")
    return {"game": asdict(game), "learner": asdict(spec), "seeds": seeds, "drawn": drawn,
            "questions": describe_questions(questions, game.turns), "arms": arms,
            "best_response_check": checks, "wall_s": round(time.time() - t0, 1)}


def sensitivity(game: GameSpec, spec: LearnerSpec, seeds: list[int], sweep_questions: int = 24) -> dict:
    """How the outcome moves with the optimiser, the schedule, sampling, the filter and T."""
    t0 = time.time()
    questions, _ = sample_questions(game)
    out: dict = {"partner_pi_of_single_arm": 0.7}
    variants = {"plain REINFORCE (no Fisher preconditioning)": replace(spec, natural=False),
                "constant tau=0.05 (no annealing)": replace(spec, tau_start=0.05, tau_end=0.05),
                "no restarts (every episode from turn 0)": replace(spec, restart=0.0)}
    for label, variant in variants.items():
        out[label] = {}
        for pi in (0.7, None):
            final = run_arm(questions, game.turns, pi, seeds, variant)["final"]
            out[label][arm_name(pi)] = {key: final[key] for key in
                                        ("collab_rate_exact", "return_exact", "collab_rate_exact_per_question")}
    # The same learner without sampling noise, per question of the main experiment.
    out["expected-update learner, per question"] = {arm_name(pi): expected_rates(questions, game.turns, pi, spec)
                                                    for pi in (0.7, None)}
    # Unfiltered questions from the same ranges, one seed: which ones show the claim?
    sweep_game = replace(game, filtered=False, n_questions=sweep_questions, question_seed=game.question_seed + 1)
    sweep_q, _ = sample_questions(sweep_game)
    sweep_spec = replace(spec, episodes=spec.episodes * sweep_questions // game.n_questions)  # same per question
    single = run_arm(sweep_q, game.turns, 0.7, seeds[:1], sweep_spec)["final"]["collab_rate_exact_per_question"]
    pair = run_arm(sweep_q, game.turns, None, seeds[:1], sweep_spec)["final"]["collab_rate_exact_per_question"]
    rows = describe_questions(sweep_q, game.turns)
    for row, q, s_rate, p_rate in zip(rows, sweep_q, single, pair):
        row.update({"passes_filter": needs_committed_partner(q, game.turns, game.hard_pi),
                    "single_vs_0.7": s_rate, "pair": p_rate})
    out["unfiltered_questions"] = sorted(rows, key=lambda r: (r["switch_pi"] is None, r["switch_pi"] or 0.0))
    # T = 20, the paper's longer game: thresholds scaled with T, one seed, sampled and expected.
    long_game = replace(game, turns=20, thresholds=(24, 26, 28))
    long_q, _ = sample_questions(long_game)
    out["T=20"] = {"questions": describe_questions(long_q, 20)}
    for pi in (0.7, None):
        out["T=20"][arm_name(pi)] = {
            "sampled": run_arm(long_q, 20, pi, seeds[:1], spec)["final"]["collab_rate_exact_per_question"],
            "expected": expected_rates(long_q, 20, pi, spec)}
    out["wall_s"] = round(time.time() - t0, 1)
    return out


def experiment(seeds: list[int], iterations: int, with_sensitivity: bool) -> dict:
    """Every arm over `seeds`, and optionally the sensitivity variants: what main and the benchmark record."""
    game, spec = GameSpec(), LearnerSpec(iterations=iterations)
    results = run_experiment(game, spec, seeds)
    if with_sensitivity:
        results["sensitivity"] = sensitivity(game, spec, seeds)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, help="directory for results.json and collaboration_game.svg")
    ap.add_argument("--record", type=Path, metavar="FILE",
                    help="write the recorded result: curves every 5th iteration, with provenance")
    ap.add_argument("--figure", type=Path, metavar="SVG", help="write the figure here")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--iterations", type=int, default=LearnerSpec.iterations)
    ap.add_argument("--sensitivity", action="store_true", help="also run the optimiser/schedule/filter variants")
    a = ap.parse_args()
    if not (a.out or a.record or a.figure):
        ap.error("say where to write: --out DIR, --record FILE and/or --figure SVG")
    t0 = time.time()
    results = experiment([int(s) for s in a.seeds.split(",")], a.iterations, a.sensitivity)
    results["total_wall_s"] = round(time.time() - t0, 1)
    wrote = write_outputs(results, out=a.out, figure=a.figure, record=a.record)
    print(summary_table(results))
    print(f"wall time {results['total_wall_s']} s (main experiment {results['wall_s']} s); wrote "
          + ", ".join(map(str, wrote)))


if __name__ == "__main__":
    main()
