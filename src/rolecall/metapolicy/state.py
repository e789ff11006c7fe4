"""Meta-cognitive state of a deliberating agent: its self-report, parsed, and the features a meta-policy sees.

From "Learning to Deliberate: Meta-policy Collaboration for Agentic LLMs with Multi-agent
Reinforcement Learning" (MPDF): each round every agent reports its answer with a short
self-assessment; the meta-policy picks PERSIST, REFINE or CONCEDE from a low-dimensional
state built from that report and from how the agent's answer sits among its peers'. Its
introspective confidence is a critic's verdict: the same backbone, prompted to judge the
agent's reply, says Correct or Incorrect (the deliberation workflow's `critic` option).
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

from rolecall.parsing import final_answer, last_boxed, strip_think

ACTIONS = ("persist", "refine", "concede")
PERSIST, REFINE, CONCEDE = range(len(ACTIONS))

# Counts above this carry no extra signal and would dominate the other, [0, 1] features.
COUNT_CAP = 10

# One layout for own and peer vectors, so a single embedding network reads both.
FEATURES = (
    "has_answer",         # 1 if the agent gave a non-empty \boxed{} answer
    "confidence",         # self-reported, in [0, 1]; 0.5 when missing
    "confidence_missing",  # 1 if no confidence was reported
    "steps",              # min(steps, COUNT_CAP) / COUNT_CAP; 0 when missing
    "steps_missing",
    "operations",         # min(operations, COUNT_CAP) / COUNT_CAP; 0 when missing
    "operations_missing",
    "peer_agreement",     # fraction of this agent's peers (everyone else) giving the same answer
    "is_plurality",       # 1 if this agent's answer is a most common answer (ties included)
    "group_share",        # size of this agent's answer group, itself included, / number of agents
    "agrees_with_own",    # 1 if the answer equals the focal agent's (own vector: 1 if it has one)
    "critic_correct",     # the critic's verdict on the reply: 1 Correct, 0 Incorrect, 0.5 when missing
    "critic_missing",     # 1 if no critic judged the reply or its verdict was unreadable
)
STATE_DIM = len(FEATURES)


@dataclass(frozen=True)
class AgentState:
    """What one agent reported this round; None wherever the report said nothing usable."""

    answer: str | None = None
    steps: int | None = None
    confidence: float | None = None
    operations: int | None = None
    critic: bool | None = None  # the critic's verdict on the reply (Correct = True)


_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)"
_INT = re.compile(r"\d+(?!\d|\.\d)")
_CONF = re.compile(rf"({_NUMBER})\s*(?:(%)|/\s*({_NUMBER}))?")


def _field(text: str, key: str) -> str | None:
    """The value after the last `key:` line; tolerates markdown (`**Steps:** 3`, `- Steps = 3`)."""
    found = re.findall(rf"(?im)^[\s>*_#-]*{key}[\s*_]*[:=][\s*_]*([^\n]*)", text)
    return found[-1] if found else None


def _count(value: str | None) -> int | None:
    """A non-negative whole number; "3 steps" and "3." -> 3; "2.5", "-1" or "three" -> None."""
    m = _INT.match(value.strip()) if value is not None else None
    return int(m.group(0)) if m else None


def _confidence(value: str | None) -> float | None:
    """0.8, "80%" and "8/10" all mean 0.8; clamped to [0, 1]."""
    m = _CONF.match(value.strip()) if value is not None else None
    if m is None:
        return None
    x = float(m.group(1))
    if m.group(2):
        x /= 100
    elif m.group(3) is not None:
        denom = float(m.group(3))
        if denom <= 0:
            return None
        x /= denom
    return min(max(x, 0.0), 1.0) if math.isfinite(x) else None


def parse_profile(text: str, answer_from: str = "boxed") -> AgentState:
    """The answer (last balanced \\boxed{}; with `answer_from` another than boxed, a reply
    without a box falls back as `rolecall.parsing.final_answer` says) and the
    Steps/Operations/Confidence self-report.

    Keys are case-insensitive and each is optional; the last occurrence wins because the
    report closes the reply. Never raises: anything unreadable becomes None.
    """
    if not isinstance(text, str):
        return AgentState()
    body = strip_think(text)
    answer = last_boxed(body) if answer_from == "boxed" else final_answer(_without_report(body), answer_from).text
    return AgentState(
        answer=answer or None,
        steps=_count(_field(body, "steps")),
        confidence=_confidence(_field(body, "confidence")),
        operations=_count(_field(body, "operations")),
    )


def _without_report(body: str) -> str:
    """The reply before its self-report lines, so a plain answer is not read from `Confidence: 0.8`."""
    return re.sub(r"(?im)^[\s>*_#-]*(?:steps|operations|confidence)[\s*_]*[:=][^\n]*$", "", body)


def answer_key(answer: str | None) -> str | None:
    """Answers compare equal when they differ only in whitespace ("x = 2" and "x=2")."""
    key = "".join(answer.split()) if answer is not None else ""
    return key or None


def _count_feature(value: int | None) -> tuple[float, float]:
    return (0.0, 1.0) if value is None else (min(value, COUNT_CAP) / COUNT_CAP, 0.0)


def _vector(agent: AgentState, key: str | None, counts: Counter, n: int, own_key: str | None) -> list[float]:
    top = max(counts.values(), default=0)
    same = counts[key] if key is not None else 0
    conf_missing = agent.confidence is None
    return [
        float(key is not None),
        0.5 if conf_missing else float(agent.confidence),
        float(conf_missing),
        *_count_feature(agent.steps),
        *_count_feature(agent.operations),
        (same - 1) / (n - 1) if key is not None and n > 1 else 0.0,
        float(key is not None and same == top),
        same / n,
        float(key is not None and key == own_key),
        0.5 if agent.critic is None else float(agent.critic),
        float(agent.critic is None),
    ]


def features(own: AgentState, peers: list[AgentState]) -> tuple[list[float], list[list[float]]]:
    """(own vector, one vector per peer, in order), each laid out as FEATURES.

    Agreement features are computed over the whole group (own + peers), so a peer's vector
    describes that peer exactly as its own meta-policy would see itself.
    """
    group = [own, *peers]
    keys = [answer_key(a.answer) for a in group]
    counts = Counter(k for k in keys if k is not None)
    vectors = [_vector(a, k, counts, len(group), keys[0]) for a, k in zip(group, keys)]
    return vectors[0], vectors[1:]


def round_features(states: list[AgentState]) -> list[tuple[list[float], list[list[float]]]]:
    """features() for every agent of one round: agent i sees the others as peers, in order."""
    return [features(s, states[:i] + states[i + 1:]) for i, s in enumerate(states)]
