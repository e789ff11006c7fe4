"""The generic role functions in many wordings, for pretraining the embedded model.

Users write their own prompts. A model pretrained only on the shipped prompts answers the
shipped wording and garbles the rest: a two-solver workflow with a judge, worded by a user,
started at 0.5 % validation accuracy while its solvers were right 60 % of the time on the
shipped wording. So make-base also shows the model every function a role commonly plays —
solve, revise after feedback, revise after reading peers' answers, pick one of N, combine N
answers, judge right or wrong, critique, plan strategies — each worded from interchangeable
parts (instruction, answer format, problem label, persona, order, separators), so that no
single wording is what the model learns.

The player is the same noisy oracle as the workflow transcripts (`OracleRates`): right at set
rates, plausible noise otherwise, so reinforcement learning has headroom on a user's workflow.
Every answer the oracle writes is `\\boxed{...}` (a verdict, a number, a pick) or a numbered
list, whatever example the prompt shows.
"""
from __future__ import annotations

import random
from typing import Callable

from rolecall.basemodel.transcripts import CRITIQUES_BAD, CRITIQUES_GOOD, STRATEGIES, OracleRates, wrong_answer
from rolecall.types import Problem

Messages = list[dict]

PERSONAS = ("You are a careful solver.", "You are a math expert.", "You are agent {k} of {n}.",
            "You are one of {n} solvers.", "Act as a solver.", "You are a helpful assistant.", "Be brief.",
            "You are a teacher.", "You are a student.")
SOLVE = ("Solve.", "Solve this.", "Solve the problem.", "Solve the following.", "Compute.", "Calculate.",
         "Calculate the result.", "Work it out.", "Find the answer.", "What is the answer?", "Evaluate.",
         "Evaluate the expression.", "Answer the question.", "Please solve.", "Compute the value.", "Find the value.",
         "Do the arithmetic.", "Give the result.", "Solve step by step.", "Think, then answer.")
# `{ex}` is a random example value the answer must not copy.
BOX = ("Put the final answer in \\boxed{{}}.", "Answer in \\boxed{{}}.", "Give the answer as \\boxed{{n}}.",
       "Box your answer.", "Write the answer inside \\boxed{{}}.", "Final answer in \\boxed{{}}.",
       "Reply with \\boxed{{answer}}.", "End with \\boxed{{result}}.", "Use \\boxed{{}} for the result.",
       "Format: \\boxed{{number}}.", "Put the result in \\boxed{{...}}.", "Answer like \\boxed{{{ex}}}.",
       "Only output \\boxed{{value}}.", "Return the final answer boxed, e.g. \\boxed{{{ex}}}.",
       "The answer goes in \\boxed{{}}.",
       # the format described in words: users write "in a box" and expect \boxed{}
       "Give the final result in a box.", "Put your answer in a box.", "Box the final result.",
       "Write the result boxed.", "Give the answer boxed.", "Enclose the final answer in a box.",
       "Box the number at the end.", "Put the final number in a box.", "Present the result in a box.")
PROBLEM = ("{p}", "Problem: {p}", "Question: {p}", "Task: {p}", "Q: {p}", "Compute {p}.", "What is {p}?",
           "{p} = ?", "Problem:\n{p}", "Input: {p}", "Expression: {p}", "Exercise: {p}", "Problem {p}",
           "Here is the problem: {p}", "The task is {p}.", "We need {p}.")
HINT = ("Strategy: {s}", "Hint: {s}", "Approach: {s}", "Use this method: {s}", "Solve with this strategy: {s}")

OWN = ("Your answer: {a}", "You said {a}.", "Your previous answer was {a}.", "Your answer was {a}.",
       "You answered {a}.", "Earlier you wrote {a}.", "Your draft: {a}",
       # the user speaking as the solver
       "My answer was {a}.", "I got {a}.", "My result: {a}", "I answered {a}.")
PEER = ("Another agent answered {a}.", "A peer says: {a}", "Agent {k}: {a}", "Other solver: {a}",
        "Your teammate answered {a}.", "Peer answer: {a}", "Solver {k} said {a}.", "Another solution: {a}",
        "Someone else got {a}.", "Agent {k} answered {a}.", "My partner got {a}.", "A classmate got {a}.",
        "The other solver got {a}.", "Their result: {a}", "A colleague found {a}.")
# A score note after a peer's answer (a debate with `peer_scores`, a user's own checker).
PEER_NOTE = (" (checked: {v})", " ({v})", " [{v}]", " - judged {v}", " (verifier: {v})")
PEER_STEM = ("Reconsider.", "Think again.", "Taking this into account, answer again.", "Update your answer.",
             "Which is right?", "Revise if needed.", "Keep or change your answer.", "Look at both and decide.",
             "Check again.")
PEER_ASK = ("Reconsider and give your final answer in \\boxed{{}}.", "Taking this into account, answer in \\boxed{{}}.",
            "Read the other answers, then give yours in \\boxed{{}}.", "Update your answer. Answer in \\boxed{{}}.",
            "Which is right? Give the final answer in \\boxed{{}}.", "Revise if needed; answer in \\boxed{{}}.",
            "Debate: give your updated answer as \\boxed{{n}}.", "Keep or change your answer; reply \\boxed{{}}.")

FEEDBACK = ("Review: {c}", "A checker said: {c}", "Feedback: {c}", "The reviewer says: {c}", "Critique: {c}",
            "Comment: {c}", "Verifier: {c}", "Someone checked your answer: {c}", "Grader: {c}")
REVISE_STEM = ("Write a corrected solution.", "Try again.", "Revise your answer.", "Fix it.", "Think again.",
               "Reconsider.", "Improve it.", "Have another look.")
REVISE_ASK = ("Write a corrected solution. Answer in \\boxed{{}}.", "Try again. Answer in \\boxed{{}}.",
              "Revise your answer in \\boxed{{}}.", "Fix it and give the final answer in \\boxed{{}}.",
              "Give your final answer in \\boxed{{}}.", "Reconsider, then answer in \\boxed{{}}.",
              "Improve it. Final answer in \\boxed{{}}.")

LISTING = ("{k}: {a}", "{k}. {a}", "({k}) {a}", "Answer {k}: {a}", "Candidate {k}: {a}", "Solver {k}: {a}",
           "Option {k}: {a}", "#{k} {a}", "[{k}] {a}", "Agent {k}: {a}")
# Candidates labelled by ordinal ("First: ...") are picked by number; by letter, by letter.
ORDINALS = ("First", "Second", "Third", "Fourth")
ORDINAL_LISTING = ("{o}: {a}", "{o} answer: {a}", "{o} solver: {a}", "The {ol} one: {a}", "{o} - {a}")
LETTER_LISTING = ("{l}) {a}", "{l}: {a}", "({l}) {a}", "Option {l}: {a}", "Answer {l}: {a}", "{l}. {a}")
PICK_STEM = ("Who is right?", "Which is correct?", "Which one is right?", "Which answer do you trust?",
             "Pick the correct one.", "Choose one.", "Which of these is correct?", "Decide which is right.")
REPLY_VERB = ("Reply", "Say", "Answer", "Write", "Output", "Respond")
PICK = ("Pick the best of {n} candidates. Reply only \\boxed{{k}}.", "Which answer is correct? Reply with its number in \\boxed{{}}.",
        "Choose the right answer. Give its number as \\boxed{{k}}.", "Select the correct candidate, \\boxed{{1}} to \\boxed{{{n}}}.",
        "Which one is right? Answer with the index in \\boxed{{}}.", "Pick one of the {n}. Reply \\boxed{{number}}.",
        "Choose the best candidate by number: \\boxed{{k}}.")
COMBINE = ("Compare the solutions and give the final answer in \\boxed{{}}.", "Read the answers below and give the final answer in \\boxed{{}}.",
           "Decide the final answer from these. Reply \\boxed{{}}.", "Several agents answered. What is the final answer? Use \\boxed{{}}.",
           "Combine these into one final answer in \\boxed{{}}.", "Aggregate the answers. Final answer in \\boxed{{}}.")

VERDICTS = (("Correct", "Incorrect"), ("OK", "WRONG"), ("yes", "no"), ("right", "wrong"), ("True", "False"),
            ("CORRECT", "INCORRECT"), ("valid", "invalid"), ("Accept", "Reject"), ("PASS", "FAIL"), ("Yes", "No"))
JUDGE = ("Check the solution. Reply \\boxed{{{y}}} or \\boxed{{{n}}}.", "Is this answer right? Reply \\boxed{{{y}}} or \\boxed{{{n}}}.",
         "Judge the answer: \\boxed{{{y}}} if correct, \\boxed{{{n}}} if not.", "Verify the answer and reply \\boxed{{{y}}} or \\boxed{{{n}}}.",
         "Is it correct? Answer \\boxed{{{y}}} or \\boxed{{{n}}}.", "Grade it: \\boxed{{{y}}} or \\boxed{{{n}}}.",
         "Reply \\boxed{{{y}}} when the answer is right and \\boxed{{{n}}} when it is wrong.")
# The verb of a reply request says nothing about the function ("Respond" once meant "a letter"
# to the model, and a verdict request worded with it drew letters): every function uses them all.
JUDGE_STEM = ("Check the solution.", "Is this answer right?", "Is it correct?", "Verify the answer.", "Grade it.",
              "Is the result right?", "Check it.", "Was this solved correctly?")
WHY = (" With a short critique.", " And say why.", " Add one line of feedback.", " Explain briefly.")
SOLUTION = ("Solution: {a}", "Answer: {a}", "Proposed answer: {a}", "Claimed answer: {a}", "Their answer: {a}",
            "Response: {a}", "Candidate: {a}")
CRITIQUE = ("Critique the solution in one line. Do not solve it.", "Point out any mistake. Do not give the answer.",
            "Give short feedback on this answer.", "What is wrong, if anything? One line.", "Review this solution briefly.")
PLAN = ("List {n} different strategies, one per line. Do not solve.", "Suggest {n} ways to solve this, numbered. No answer.",
        "Give {n} approaches, one per line.", "Name {n} methods for this problem. Do not solve it.",
        "Propose {n} plans, numbered, without solving.", "Write {n} strategies as a numbered list.")
NOT_SOLVE = ("", " Do not solve it.", " Do not give the answer.")
# Words around the task that change nothing: users' prompts carry greetings, context and
# asides, and a role must answer the same through them.
FILLER = ("Thanks.", "Quick one.", "Please help.", "Take your time.", "This is for practice.", "Be careful.",
          "Here it is.", "Let's check.", "Good luck.", "Another one.", "Homework time.", "For a quiz.",
          "No rush.", "Double-check your work.", "Short answer please.", "From a worksheet.")


def user(text: str) -> dict:
    return {"role": "user", "content": text}


class Wordings:
    """Draws (messages, oracle completion) for one role function in a random wording."""

    def __init__(self, rates: OracleRates, rng: random.Random) -> None:
        self.rates, self.rng = rates, rng

    # --- pieces -------------------------------------------------------------------------------
    def pick(self, options, **fill) -> str:
        return self.rng.choice(options).format(**fill)

    def joined(self, parts: list[str]) -> str:
        return self.rng.choice(("\n", "\n", " ")).join(p for p in parts if p)

    def shown(self, value: int) -> str:
        """An answer as a prompt shows it: boxed (as a model wrote it) or bare."""
        return self.rng.choice((f"\\boxed{{{value}}}", f"\\boxed{{{value}}}", str(value)))

    def guess(self, truth: int) -> int:
        return truth if self.rng.random() < self.rates.solve else wrong_answer(truth, self.rng)

    def boxed_guess(self, truth: int) -> str:
        return f"\\boxed{{{self.guess(truth)}}}"

    def opening(self, p: Problem, instruction: str) -> Messages:
        """Instruction and problem in either order, optionally behind a persona (system or inline)."""
        problem = self.pick(PROBLEM, p=p.prompt)
        parts = [instruction, problem] if self.rng.random() < 0.6 else [problem, instruction]
        msgs: Messages = []
        if self.rng.random() < 0.3:
            persona = self.pick(PERSONAS, k=self.rng.randint(1, 3), n=self.rng.randint(2, 4))
            if self.rng.random() < 0.5:
                msgs.append({"role": "system", "content": persona})
            else:
                parts.insert(0, persona)
        if self.rng.random() < 0.25:
            parts.insert(self.rng.choice((0, len(parts))), self.pick(FILLER))
        return msgs + [user(self.joined(parts))]

    def solve_instruction(self) -> str:
        parts = [self.pick(SOLVE), self.pick(BOX, ex=self.rng.randint(0, 199))]
        if self.rng.random() < 0.2:
            parts = parts[1:]  # the format alone is the instruction
        if self.rng.random() < 0.2:
            parts.append(self.pick(HINT, s=self.rng.choice(STRATEGIES)))
        return self.joined(parts)

    def listing(self, values: list[int], labels: str = "number") -> str:
        form = self.rng.choice({"number": LISTING, "ordinal": ORDINAL_LISTING, "letter": LETTER_LISTING}[labels])
        return "\n".join(form.format(k=i + 1, o=ORDINALS[i], ol=ORDINALS[i].lower(), l="ABCD"[i], a=self.shown(v))
                         for i, v in enumerate(values))

    def pick_request(self, n: int, labels: str) -> str:
        """How to answer a pick: by number (numbered or ordinal labels) or by letter."""
        verb, wverb = self.rng.choice(REPLY_VERB), self.rng.choice(("Reply", "Answer", "Respond"))
        if labels == "letter":
            keys = [f"\\boxed{{{'ABCD'[i]}}}" for i in range(n)]
            spec = self.rng.choice((f"{wverb} with the letter in \\boxed{{}}.", f"{verb} {keys[0]} to {keys[-1]}.",
                                    f"{verb} {', '.join(keys[:-1])} or {keys[-1]}."))
        elif labels == "ordinal" and self.rng.random() < 0.6:
            spec = f"{verb} " + ", ".join(f"\\boxed{{{i + 1}}} for the {ORDINALS[i].lower()}" for i in range(n)) + "."
        else:
            spec = self.rng.choice((f"{wverb} with its number in \\boxed{{}}.", f"{verb} \\boxed{{1}} to \\boxed{{{n}}}.",
                                    f"{verb} only \\boxed{{k}}."))
        return self.joined([self.pick(PICK_STEM), spec])

    def revise_request(self, fused: tuple[str, ...], stems: tuple[str, ...]) -> str:
        """A revise request: a fused instruction-and-format, or a stem and any answer format."""
        if self.rng.random() < 0.4:
            return self.pick(fused)
        return self.joined([self.pick(stems), self.pick(BOX, ex=self.rng.randint(0, 199))])

    def candidates(self, truth: int, n: int) -> list[int]:
        return [self.guess(truth) for _ in range(n)]

    def select(self, truth: int, values: list[int]) -> int:
        right = [i + 1 for i, v in enumerate(values) if v == truth]
        if right and self.rng.random() < self.rates.select:
            return self.rng.choice(right)
        return self.rng.randint(1, len(values))

    # --- the role functions -------------------------------------------------------------------
    def solve(self, p: Problem, truth: int) -> tuple[Messages, str]:
        return self.opening(p, self.solve_instruction()), self.boxed_guess(truth)

    def revise_after_feedback(self, p: Problem, truth: int) -> tuple[Messages, str]:
        first = self.guess(truth)
        yes, no = self.rng.choice(VERDICTS)
        said_right = (first == truth) == (self.rng.random() < self.rates.judge)
        note = f"\\boxed{{{yes if said_right else no}}} " + self.rng.choice(CRITIQUES_GOOD if said_right else CRITIQUES_BAD)
        ask = self.joined([self.pick(FEEDBACK, c=note), self.revise_request(REVISE_ASK, REVISE_STEM)])
        if self.rng.random() < 0.6:  # as a conversation: the draft is the model's own earlier turn
            msgs = self.opening(p, self.solve_instruction())
            msgs += [{"role": "assistant", "content": f"\\boxed{{{first}}}"}, user(ask)]
        else:
            msgs = self.opening(p, self.joined([self.pick(OWN, a=self.shown(first)), ask]))
        return msgs, self.boxed_guess(truth)

    def revise_after_peers(self, p: Problem, truth: int) -> tuple[Messages, str]:
        lines = [self.pick(OWN, a=self.shown(self.guess(truth)))] if self.rng.random() < 0.7 else []
        form = self.rng.choice(PEER)
        note = self.rng.choice(PEER_NOTE) if self.rng.random() < 0.3 else ""
        for k in range(self.rng.randint(1, 3)):
            said = self.guess(truth)
            line = form.format(k=k + 2, a=self.shown(said))
            if note:  # the note is right at the judge's rate
                right = (said == truth) == (self.rng.random() < self.rates.judge)
                line += note.format(v="correct" if right else "incorrect")
            lines.append(line)
        return self.opening(p, self.joined(lines + [self.revise_request(PEER_ASK, PEER_STEM)])), self.boxed_guess(truth)

    def pick_one(self, p: Problem, truth: int) -> tuple[Messages, str]:
        values = self.candidates(truth, self.rng.randint(2, 4))
        labels = self.rng.choice(("number", "number", "number", "ordinal", "ordinal", "letter"))
        ask = self.pick(PICK, n=len(values)) if labels == "number" and self.rng.random() < 0.5 else self.pick_request(len(values), labels)
        listing = self.listing(values, labels)
        parts = [ask, listing] if self.rng.random() < 0.5 else [listing, ask]  # the request before or after the list
        k = self.select(truth, values)
        return self.opening(p, self.joined(parts)), f"\\boxed{{{'ABCD'[k - 1] if labels == 'letter' else k}}}"

    def combine(self, p: Problem, truth: int) -> tuple[Messages, str]:
        values = self.candidates(truth, self.rng.randint(2, 4))
        ask = self.pick(COMBINE)
        chosen = values[self.select(truth, values) - 1]
        listing = self.listing(values, self.rng.choice(("number", "number", "number", "ordinal", "ordinal", "letter")))
        return self.opening(p, self.joined([ask, listing])), f"\\boxed{{{chosen}}}"

    def judge(self, p: Problem, truth: int) -> tuple[Messages, str]:
        said = self.guess(truth)
        yes, no = self.rng.choice(VERDICTS)
        why = self.rng.random() < 0.5
        if self.rng.random() < 0.5:
            ask = self.pick(JUDGE, y=yes, n=no)
        else:
            ask = f"{self.pick(JUDGE_STEM)} {self.rng.choice(REPLY_VERB)} \\boxed{{{yes}}} or \\boxed{{{no}}}."
        ask += self.rng.choice(NOT_SOLVE) + (self.rng.choice(WHY) if why else "")
        right = (said == truth) == (self.rng.random() < self.rates.judge)
        out = f"\\boxed{{{yes if right else no}}}"
        if why:
            out += " " + self.rng.choice(CRITIQUES_GOOD if right else CRITIQUES_BAD)
        return self.opening(p, self.joined([ask, self.pick(SOLUTION, a=self.shown(said))])), out

    def critique(self, p: Problem, truth: int) -> tuple[Messages, str]:
        said = self.guess(truth)
        right = (said == truth) == (self.rng.random() < self.rates.judge)
        msgs = self.opening(p, self.joined([self.pick(CRITIQUE), self.pick(SOLUTION, a=self.shown(said))]))
        return msgs, self.rng.choice(CRITIQUES_GOOD if right else CRITIQUES_BAD)

    def plan(self, p: Problem, truth: int) -> tuple[Messages, str]:
        n = self.rng.randint(2, 4)
        picks = self.rng.sample(STRATEGIES, n)
        return self.opening(p, self.pick(PLAN, n=n)), "\n".join(f"{i + 1}. {s}" for i, s in enumerate(picks))


# How often each function is drawn: solving dominates, as it does in workflows.
FUNCTIONS: dict[str, tuple[Callable, float]] = {
    "solve": (Wordings.solve, 0.28),
    "revise_after_feedback": (Wordings.revise_after_feedback, 0.12),
    "revise_after_peers": (Wordings.revise_after_peers, 0.15),
    "pick_one": (Wordings.pick_one, 0.12),
    "combine": (Wordings.combine, 0.08),
    "judge": (Wordings.judge, 0.13),
    "critique": (Wordings.critique, 0.05),
    "plan": (Wordings.plan, 0.07),
}


def role_function_examples(problems: list[Problem], n: int, rates: OracleRates, seed: int) -> list[tuple[Messages, str, str]]:
    """`n` (messages, completion, function name) drawn over `problems`, reproducibly from `seed`."""
    rng = random.Random(seed)
    w = Wordings(rates, rng)
    names = list(FUNCTIONS)
    weights = [FUNCTIONS[k][1] for k in names]
    out = []
    for _ in range(n):
        name = rng.choices(names, weights)[0]
        p = problems[rng.randrange(len(problems))]
        msgs, completion = FUNCTIONS[name][0](w, p, int(p.answer))
        out.append((msgs, completion, name))
    return out
