"""The contract between a workflow and rolecall: the `Team` it calls and the `Workflow` base."""
from __future__ import annotations

import math
import os
import traceback
from string import Template
from typing import Any, ClassVar, Mapping, Protocol

from rolecall.errors import UserError
from rolecall.parsing import ANSWER_FROM, ROLE_FORMATS
from rolecall.types import Demonstration, Episode, Message, Problem, Reply


class WorkflowError(UserError, RuntimeError):
    """A workflow's own code failed during an episode; the message names the workflow, the
    problem, the error and the line of workflow code it came from."""


def describe_failure(workflow: str, problem: str, e: BaseException) -> str:
    """One line about an exception raised by a workflow's `run`: the innermost frame of
    workflow code (the user's file, else a shipped workflow's), else the innermost frame."""
    frames = traceback.extract_tb(e.__traceback__)
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # rolecall/
    shipped = os.path.dirname(os.path.abspath(__file__)) + os.sep  # rolecall/workflows/
    own = [f for f in frames if not os.path.abspath(f.filename).startswith(package + os.sep)]
    ours = [f for f in frames if os.path.abspath(f.filename).startswith(shipped)]
    at = (own or ours or frames)[-1] if frames else None
    where = f" (at {at.filename}:{at.lineno}, in {at.name})" if at else ""
    return f"workflow {workflow!r} failed on problem {problem!r}: {type(e).__name__}: {e}{where}"


class Team(Protocol):
    """What a workflow sees of the models: one awaitable LLM call per role turn.

    `slot` names the call site for grouping (defaults to the role); routing picks the
    policy from the role. `call` returns a `Reply`: the completion text, with `.turn`, the
    index of the turn that produced it. `info` collects workflow facts for diagnostics.

    Credit beyond the outcome, in a line each (turns left alone get the outcome reward):

        reply = await team.call("solver", chat)
        team.grade(reply, "drafts")                 # graded by the run's verifier: episode.grades("drafts")
        team.grade(reply, "drafts", reward=True)    # ... and that grade is this turn's reward
        team.reward(reply, 0.0)                     # a reward of your own for this turn
        score = await team.check(reply)             # the verifier's score now, to show a peer (None: unscorable)
        self.missed_format(team, reply)             # no pick/verdict in it: charged `format_penalty` if set

    Rewards that need every grade first (a discounted future, a peer's outcome) come from
    `Workflow.turn_rewards(episode)`, which runs after scoring and overrides the above.
    An unscorable grade is None: the turn leaves its group's statistics (advantage 0).

    `training` is True in training rollouts and False in validation and evaluation, so a
    workflow can add turns that only serve learning (an augmented copy of a turn) there.
    """

    info: dict[str, Any]
    training: bool

    async def call(self, role: str, messages: list[Message], *, slot: str | None = None) -> Reply: ...

    async def check(self, text: str) -> float | None: ...

    def grade(self, text: str, name: str = "graded", *, reward: bool = False) -> None: ...

    def reward(self, reply: Reply, value: float | None) -> None: ...


class Workflow:
    """A multi-agent program: `await run(problem, team)` returns the final answer text.

    Subclasses declare `name`, the `roles` they call, and keyword options with defaults.
    Prompts come from data files (see `prompts/`), keyed by template name.
    """

    name: ClassVar[str]
    # The roles it calls. When options change them (a debate with n agents, a vote without an
    # aggregator), set `self.roles` (and `self.templates`) in __init__ before
    # super().__init__(): routing is validated against the instance a run builds.
    roles: tuple[str, ...]
    # The templates `run` renders and the `$placeholders` each is given. Declared, they are
    # checked when the workflow is built, so a prompt file with a missing template, a typo in
    # a placeholder or a stray `$` fails before any model loads, not mid-run.
    templates: Mapping[str, tuple[str, ...]] = {}
    # Extra per-role diagnostics to log (role -> names in diagnostics' ROLE_DIAGNOSTICS, e.g.
    # {"judge": ("verdict_form",)}); every role always gets the common signatures.
    role_diagnostics: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    # Per-role format credit (`workflow.options.format_penalty` where a workflow offers it): a
    # turn recorded by `missed_format` earns its reward less this (`algo.credit.credit`).
    format_penalty: float = 0.0

    def __init__(self, prompts: Mapping[str, str]) -> None:
        self.prompts = dict(prompts)
        check_templates(self.name, self.prompts, self.templates)

    def render(self, template: str, **values: Any) -> str:
        # string.Template: `$name` placeholders never clash with LaTeX braces, and it runs no code.
        if template not in self.prompts:
            raise KeyError(f"workflow {self.name!r}: no prompt template {template!r} "
                           f"(available templates: {sorted(self.prompts)})")
        try:
            return Template(self.prompts[template]).substitute(**values)
        except KeyError as e:
            raise KeyError(f"workflow {self.name!r}: prompt template {template!r} needs {e} "
                           f"(available templates: {sorted(self.prompts)})") from None

    async def run(self, problem: Problem, team: Team) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def missed_format(self, team: Team, reply: Reply) -> None:
        """Record that `reply` did not produce its role's format (a pick, a verdict, a list), so
        that under `format_penalty` its turn is charged (a deviation from the papers'
        outcome-only reward: a role whose output a fallback replaced is not paid as if it had
        done its job). Nothing is recorded when the penalty is off."""
        if self.format_penalty:
            team.info.setdefault("unformatted_turns", []).append(reply.turn)

    def turn_rewards(self, episode: Episode) -> dict[int, float | None] | None:
        """Rewards of particular turns (by `Turn.index`) that replace the episode's outcome for
        them, after scoring; None (the default) broadcasts the outcome to every turn, as the
        paper does. A value of None marks that turn unscorable (advantage 0)."""
        return None

    def metrics(self, episodes: list[Episode]) -> dict[str, float]:
        """Workflow-specific metrics of one step's scored episodes (`<workflow>/<name>` keys)."""
        return {}

    # The roles whose replies are the answer to the problem, as opposed to the roles that select,
    # judge or plan: the paper's generator transfer ("When Does Multi-Agent RL Improve LLM
    # Workflows?", Table 3) plays them with a single-agent RL adapter and the others on the base
    # model (`rolecall compare`). Empty: the workflow has no such role, and no transfer is made.
    answering_roles: ClassVar[tuple[str, ...]] = ()

    def rule_outcomes(self, episode: Episode) -> dict[str, dict[str, float | None]]:
        """For each selecting or judging role, the graded outcome the scored `episode` would have had
        had that role followed a trivial rule instead ({role: {rule: reward}}; None: unscorable),
        re-read from the episode without a model call (a pick among graded candidates, a verdict on
        a graded draft). `rolecall compare` sets the role against its rules on the same episodes.
        Empty by default: nothing can be re-read."""
        return {}

    # The roles whose turns `counterfactuals` can credit; the counterfactual estimator
    # (`algo.estimator: {role: counterfactual}`) is refused for any other role.
    counterfactual_roles: ClassVar[tuple[str, ...]] = ()

    def counterfactuals(self, episode: Episode) -> dict[int, float | None]:
        """For turns of `counterfactual_roles` whose effect can be re-read from the scored
        `episode`: turn index -> the reward the episode would have had with that turn replaced
        by its role's stated default (None: unscorable). A turn whose default changes nothing
        maps to the episode's own reward (credit 0). Turns it cannot re-read are left out."""
        return {}

    # Roles whose turns `replay` can credit when `counterfactuals` cannot re-read them (model calls,
    # bounded per step by the counterfactual estimator's `replays` option).
    replay_roles: ClassVar[tuple[str, ...]] = ()

    async def replay(self, episode: Episode, turn: int, team: Team) -> str | None:
        """The final answer the scored `episode` would have reached with turn `turn` replaced by its
        role's default, playing the calls that follow it again through `team` from the episode's
        frozen context. None: this turn has no replay."""
        return None

    def oracle_outcome(self, episode: Episode) -> float | None:
        """The outcome a perfect selecting role would have reached on the scored `episode` (the best
        graded candidate), where the episode holds one; None otherwise. The screen's ceiling."""
        return None

    async def demonstrations(self, problem: Problem) -> list[Demonstration]:
        """Turns of `problem` played right, for a supervised warm start (`rolecall warm-start`):
        a workflow that can write them from the problem's gold data overrides this. None by
        default: most workflows' right plays (a verdict, a pick, a plan) are not in the data."""
        return []


def check_templates(workflow: str, prompts: Mapping[str, str], templates: Mapping[str, tuple[str, ...]]) -> None:
    """Every declared template exists and uses only the placeholders it is given (ValueError)."""
    for name, given in templates.items():
        if name not in prompts:
            raise ValueError(f"workflow.prompts: no template {name!r}, which workflow {workflow!r} needs "
                             f"(the prompts have {sorted(prompts)})")
        t = Template(prompts[name])
        if not t.is_valid():
            raise ValueError(f"workflow.prompts: template {name!r} has a '$' that starts no placeholder; "
                             "write $$ for a literal dollar sign")
        unknown = [x for x in t.get_identifiers() if x not in given]
        if unknown:
            raise ValueError(f"workflow.prompts: template {name!r} uses ${unknown[0]}, which workflow {workflow!r} "
                             f"does not provide; it provides {', '.join('$' + g for g in given)}")


def positive_int_option(name: str, value: Any) -> int:
    """Validate a count option (`n_voters`, `rounds` ...): an int >= 1, else a ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"workflow.options.{name}: must be an integer >= 1, got {value!r}")
    return value


def format_penalty_option(value: Any) -> float:
    """Validate `format_penalty`: a finite number >= 0, else a ValueError naming the option."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"workflow.options.format_penalty must be a number >= 0, got {value!r} (subtracted from "
                         "the reward of a turn whose output did not parse)")
    return float(value)


def answer_from_option(value: Any) -> str:
    """Validate a workflow's `answer_from` (`parsing.ANSWER_FROM`: how it reads an answer from a
    reply without a box), else a ValueError naming the option."""
    if not isinstance(value, str) or value not in ANSWER_FROM:
        raise ValueError(f"workflow.options.answer_from: must be one of {list(ANSWER_FROM)}, got {value!r}")
    return value


def role_format_option(value: Any) -> str:
    """Validate `role_format` (`parsing.ROLE_FORMATS`), else a ValueError naming the option."""
    if not isinstance(value, str) or value not in ROLE_FORMATS:
        allowed = " or ".join(repr(f) for f in ROLE_FORMATS)
        raise ValueError(f"workflow.options.role_format: must be {allowed}, got {value!r} ('plain' also reads "
                         "a pick or verdict from plain text when a reply holds no usable \\boxed{})")
    return value


def form_rates(key: str, forms: list[str]) -> dict[str, float]:
    """Under `role_format: plain`, the share of a role's parsed turns (`<key>_parsed`, either
    form) and of those read from plain text (`<key>_plain`); {} when there are none. Only
    "boxed" and "plain" are parsed: the readers' other kinds ("none", "several", ...) gave nothing."""
    if not forms:
        return {}
    return {f"{key}_parsed": sum(f in ("boxed", "plain") for f in forms) / len(forms),
            f"{key}_plain": sum(f == "plain" for f in forms) / len(forms)}


def user(text: str) -> Message:
    return {"role": "user", "content": text}


def assistant(text: str) -> Message:
    return {"role": "assistant", "content": text}
