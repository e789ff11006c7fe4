"""`rolecall make-base`: build and pretrain the embedded default model, reproducibly.

A tiny Qwen3-architecture LM and a character tokenizer are trained (full SFT, loss on the
assistant tokens only) on transcripts of every shipped workflow played by a noisy oracle.
Same seed and step count give the same weights on the same torch build.
"""
from __future__ import annotations

import json
import math
import random
import re
import time
from dataclasses import replace
from importlib.metadata import version as _version
from pathlib import Path
from typing import Callable

import torch

from rolecall.basemodel.search_oracle import SearchOracleEngine, follow, parse_question
from rolecall.basemodel.tokenizer import build_tokenizer
from rolecall.basemodel.transcripts import OracleEngine, OracleRates
from rolecall.basemodel.wordings import role_function_examples
from rolecall.policies.model import resolve_model_dir
from rolecall.rollout import rollout
from rolecall.tasks.arithmetic import ArithmeticTask
from rolecall.tasks.multihop import MultiHopTask, invent_names
from rolecall.types import Problem
from rolecall.workflows import build_workflow, load_prompts, workflow_prompts

# Eval-Opt's verdicts and Orch-Workers' strategy lists and copied picks are rarer, harder
# formats than a boxed answer. With equal transcript shares and sums-only facts the model
# garbled them (verdicts unparseable, synthesizer picks wrong) and both workflows started near
# 1 % validation accuracy, leaving RL nothing to learn from. Three times their transcripts
# alone reached 12.5 % and 5 %; adding packed copy and verdict facts (`_fact`) reached 39.5 %
# and 25 % (single 58.5 %, voting 57.5 %).
#
# The workflows (with options) whose oracle transcripts the shipped model was pretrained on,
# and how many episodes of each, as a multiple of episodes_per_workflow. Listed, not taken
# from the registry, so a new workflow does not silently change what make-base builds: the
# shipped weights stay reproducible byte for byte until it is rebuilt. A debate plays 9
# turns an episode (3 agents x 3 rounds), so it needs fewer episodes; half of its episodes
# show each peer's answer with a scorer's verdict after it.
PRETRAINED: tuple[tuple[str, dict, float], ...] = (
    ("chain", {}, 1), ("debate", {}, 0.15), ("debate", {"peer_scores": "scorer"}, 0.15),
    ("eval_opt", {}, 3), ("orch_workers", {}, 3), ("single", {}, 1), ("voting", {}, 1))
COPY_FACTS = 0.15  # share of packed facts of each of the two non-sum kinds (see `_fact`)
# search_answer is played on small multi-hop worlds drawn afresh for every episode and fact, so
# the model learns to read and follow passages, not the facts of any one world (a build on one
# fixed world of 240 people wrote that world's names from memory, not the ones on the page).
SEARCH_WORLD_PEOPLE = 12

# Small enough to train in minutes on 2 CPU cores, large enough to learn 2-digit arithmetic.
MODEL_SHAPE = dict(hidden_size=192, intermediate_size=512, num_hidden_layers=4, num_attention_heads=6,
                   num_key_value_heads=2, head_dim=32, max_position_embeddings=1024)


def build_model(tok, seed: int):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=len(tok), tie_word_embeddings=True, rope_theta=10000.0,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                      bos_token_id=None, **MODEL_SHAPE)
    model = Qwen3ForCausalLM(cfg)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return model


def _built_model(path: Path, tok):
    """A model `make_base` wrote, and its build record; refused if its tokenizer is not this one's
    (token ids would mean other characters)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model_dir(str(path), what="init_from", hint=" (build one with `rolecall make-base --out DIR`)")
    if AutoTokenizer.from_pretrained(path).get_vocab() != tok.get_vocab():
        raise ValueError(f"init_from {path}: its tokenizer is not make-base's, so its token ids mean other characters")
    build = path / "rolecall_base.json"
    return AutoModelForCausalLM.from_pretrained(path), json.loads(build.read_text()) if build.is_file() else None


def transcripts(tok, task: ArithmeticTask, episodes_per_workflow: int, rates: OracleRates,
                seed: int, role_functions: int = 0, search_episodes: int = 0,
                search_rate: float | None = None, unseen_search_errors: float = 0.0) -> list[tuple[list[int], int]]:
    """(token ids, prompt length) for every turn of oracle-played episodes of every workflow,
    plus `role_functions` generic role turns in varied wordings and `search_episodes`
    episodes of search_answer, each on a small world of its own (own random stream: 0 leaves the rest
    byte for byte as before), played right at `search_rate` (default `rates.solve`), with
    `unseen_search_errors` of the searcher's turns played wrong and left out (see
    `SearchOracleEngine`)."""
    rng = random.Random(seed)
    render = lambda msgs: tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    engine = OracleEngine(rates, rng, render)
    train = task.train()
    prompts = load_prompts("math")
    for name, options, weight in PRETRAINED:
        wf = build_workflow(name, prompts, options)
        problems = [train[rng.randrange(len(train))] for _ in range(int(episodes_per_workflow * weight))]
        rollout(wf, problems, 1, engine, {r: r for r in wf.roles}, lambda r: 0, 1.0)
    examples = list(engine.examples)
    # The same functions in many wordings (see `wordings`): users' own prompts must work too.
    examples += [(render(msgs), completion)
                 for msgs, completion, _ in role_function_examples(train, role_functions, rates, seed + 3)]
    if search_episodes:
        search_rates = rates if search_rate is None else replace(rates, solve=search_rate)
        examples += search_transcripts(render, search_episodes, search_rates, seed + 11, unseen_search_errors)
    out = []
    for prompt, completion in examples:
        p = tok(prompt, add_special_tokens=False)["input_ids"]
        c = tok(completion + tok.eos_token, add_special_tokens=False)["input_ids"]
        out.append((p + c, len(p)))
    rng.shuffle(out)
    return out


def _small_world(rng: random.Random, people: int = 6):
    """A freshly drawn multi-hop world (names no other world shares): the model has to read
    names off the page, because it cannot have memorised them."""

    return MultiHopTask(people=people, towns=max(2, people // 2), lands=max(2, people // 4), firms=max(2, people // 3),
                        n_val=1, seed=rng.getrandbits(32))


def search_transcripts(render, episodes: int, rates: OracleRates, seed: int,
                       unseen_errors: float = 0.0) -> list[tuple[str, str]]:
    """Oracle-played search_answer turns (searcher and generator, no augmented turns), each
    episode on a world of its own whose passages the question carries as its `context`."""

    rng = random.Random(seed)
    problems = []
    for i in range(episodes):
        world = _small_world(rng, people=SEARCH_WORLD_PEOPLE)
        q = world.questions[rng.randrange(len(world.questions))]
        context = [{"id": p.id, "title": p.title, "text": p.text} for p in world.passages]
        problems.append(Problem(f"{q.uid}-{i}", q.prompt, q.answer, {**q.meta, "context": context}))
    engine = SearchOracleEngine(rates.solve, rng, render, unseen_errors)
    wf = build_workflow("search_answer", workflow_prompts("search_answer", None), {"augment": 0.0})
    rollout(wf, problems, 1, engine, {r: r for r in wf.roles}, lambda r: 0, 1.0)
    return engine.examples


def name_fact_text(rng: random.Random, shift: bool = False) -> tuple[str, str, str]:
    """(kind, prompt, name) of one fact for the search roles' one hard skill, reading a name off
    the page, on a fresh small world: the name a question asks about (kind "question", the first
    query), the name its passage leads to ("bridge", the second query, among a distractor
    passage), or the answer its two passages give ("answer", among two distractors).

    With `shift`, one to three passages that do not name the question's entity come first, so
    nothing is at a fixed place. Without it a "question" fact starts with the question, and a
    model trained on such facts found the name there by its position alone: it copied the name
    right every time at the start of a prompt, 9 times in 40 after 1 to 30 filler characters and
    5 % of the time after unrelated passages."""

    world = _small_world(rng)
    texts = {p.id: p.text for p in world.passages}
    q = world.questions[rng.randrange(len(world.questions))]
    entity, first, _ = parse_question(q.prompt)
    passage, bridge_passage = (texts[i] for i in q.meta["support"])
    others = [t for i, t in texts.items() if i not in q.meta["support"]]
    kind = ("question", "bridge", "answer")[rng.randrange(3)]
    if kind == "question":
        text, name = f"{q.prompt} Query: ", entity
    elif kind == "bridge":
        shown = [passage, *rng.sample(others, 1)]
        rng.shuffle(shown)
        text, name = f"{' '.join(shown)} {q.prompt} Query: ", follow(passage, entity, first)
    else:
        shown = [passage, bridge_passage, *rng.sample(others, 2)]
        rng.shuffle(shown)
        text, name = f"{' '.join(shown)} {q.prompt} Answer: ", q.answer
    if shift:
        strangers = [t for t in others if not re.search(rf"\b{re.escape(entity)}\b", t)]
        text = " ".join([*rng.sample(strangers, min(len(strangers), rng.randint(1, 3))), text])
    return kind, text, name


def name_fact(rng: random.Random, tok, shift: bool = False) -> tuple[list[int], list[int]]:
    """One name fact (see `name_fact_text`) as token ids with the loss on the name only."""
    _, text, name = name_fact_text(rng, shift)
    q_ids = tok(text, add_special_tokens=False)["input_ids"]
    a_ids = tok(f"{name}\n", add_special_tokens=False)["input_ids"]
    return q_ids + a_ids, [0] * len(q_ids) + [1] * len(a_ids)


def copy_drill(rng: random.Random, tok, lines: int = 4) -> tuple[list[int], list[int]]:
    """Lines of one to four fresh names written twice, loss on the second writing only. A
    character model learns to copy letters from these in a sudden drop of the loss (an
    induction head forming); with loss on every character, the unpredictable first writing
    swamped the signal and the copy did not form in 500 steps."""

    ids: list[int] = []
    mask: list[int] = []
    for _ in range(lines):
        names = " ".join(invent_names(rng, rng.randint(1, 4)))
        first = tok(f"{names} | ", add_special_tokens=False)["input_ids"]
        again = tok(f"{names}\n", add_special_tokens=False)["input_ids"]
        ids += first + again
        mask += [0] * len(first) + [1] * len(again)
    return ids, mask


def copy_rows(n: int, tok, seed: int, shift: bool = False) -> list[tuple[list[int], list[int]]]:
    """Half copy drills, half name facts (see `copy_drill`, `name_fact`)."""
    rng = random.Random(seed)
    return [copy_drill(rng, tok) if rng.random() < 0.5 else name_fact(rng, tok, shift) for _ in range(n)]


def copy_steps(steps: int, rows: int, tok, seed: int, shift: bool = False) -> list[list[tuple[list[int], list[int]]]]:
    """Phase 0: `steps` batches of `rows` copy rows."""
    flat = copy_rows(steps * rows, tok, seed, shift)
    return [flat[i * rows: (i + 1) * rows] for i in range(steps)]


def _fact(p, rng: random.Random) -> tuple[str, str]:
    """One packed fact as (question, answer). Most are sums `a+b=c`; some teach the two skills
    the roles need besides arithmetic: copying the most common answer out of a numbered list
    (aggregator, synthesizer) and stamping a verdict on an answer (evaluator)."""
    kind = rng.random()
    if kind < 1 - 2 * COPY_FACTS:
        return f"{p.prompt}=", f"{p.answer}\n"
    truth = int(p.answer)
    if kind < 1 - COPY_FACTS:
        said = truth if rng.random() < 0.5 else abs(truth + rng.choice((1, -1, 10, -10, 2)))
        return f"{p.prompt} \\boxed{{{said}}} ", f"\\boxed{{{'Correct' if said == truth else 'Incorrect'}}}\n"
    xs = [truth if rng.random() < 0.5 else abs(truth + rng.choice((1, -1, 10, -10))) for _ in range(3)]
    top = max(xs, key=xs.count)  # the most common; ties to the first listed
    listing = "".join(f"{i + 1}: \\boxed{{{x}}}\n" for i, x in enumerate(xs))
    return listing, f"\\boxed{{{top}}}\n"


def packed_facts(task: ArithmeticTask, rows: int, per_row: int, tok, seed: int) -> list[tuple[list[int], list[int]]]:
    """Packed facts (loss on the answers only): the model's 'pretraining knowledge', which the
    noisy role transcripts then fail to use reliably."""
    rng = random.Random(seed + 1)
    train = task.train()
    out = []
    for _ in range(rows):
        ids: list[int] = []
        mask: list[int] = []
        for _ in range(per_row):
            qt, at = _fact(train[rng.randrange(len(train))], rng)
            q = tok(qt, add_special_tokens=False)["input_ids"]
            a = tok(at, add_special_tokens=False)["input_ids"]
            ids += q + a
            mask += [0] * len(q) + [1] * len(a)
        out.append((ids, mask))
    return out


def _as_masked(rows: list[tuple[list[int], int]]) -> list[tuple[list[int], list[int]]]:
    return [(ids, [0] * n + [1] * (len(ids) - n)) for ids, n in rows]


def _batches(rows: list[tuple[list[int], list[int]]], batch: int, rng: random.Random) -> list[list]:
    # Length buckets: sorting before batching cuts padding, shuffling batches keeps SGD mixed.
    rows = sorted(rows, key=lambda r: len(r[0]))
    out = [rows[i: i + batch] for i in range(0, len(rows), batch)]
    rng.shuffle(out)
    return out


def _batch(rows: list[tuple[list[int], list[int]]], pad: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), width), pad)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100)
    for i, (x, m) in enumerate(rows):
        ids[i, : len(x)] = torch.tensor(x)
        attn[i, : len(x)] = 1
        labels[i, : len(x)] = torch.where(torch.tensor(m) > 0, torch.tensor(x), -100)
    return ids, attn, labels


def chat_facts(task: ArithmeticTask, n: int, tok, seed: int) -> list[tuple[list[int], list[int]]]:
    """Bare questions answered right in chat form: the model *can* answer in a chat turn,
    even though the role transcripts it also sees show the roles doing it unreliably."""
    rng = random.Random(seed + 2)
    train = task.train()
    out = []
    for _ in range(n):
        p = train[rng.randrange(len(train))]
        prompt = tok.apply_chat_template([{"role": "user", "content": p.prompt}], tokenize=False, add_generation_prompt=True)
        q = tok(prompt, add_special_tokens=False)["input_ids"]
        a = tok(f"\\boxed{{{p.answer}}}{tok.eos_token}", add_special_tokens=False)["input_ids"]
        out.append((q + a, [0] * len(q) + [1] * len(a)))
    return out


def train_step(model, opt, sched, rows: list[tuple[list[int], list[int]]], pad: int) -> torch.Tensor:
    """One pretraining step on (token ids, loss mask) rows; returns the loss."""
    ids, attn, labels = _batch(rows, pad)
    loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    return loss


def make_base(out: Path, *, fact_steps: int = 1500, fact_batch: int = 16, batch: int = 32, lr: float = 3e-3,
              seed: int = 0, episodes_per_workflow: int = 1000, n_chat_facts: int = 12000, role_functions: int = 16000,
              search_episodes: int = 0, n_copy_steps: int = 0, shift_facts: bool = False,
              search_rate: float | None = None, unseen_search_errors: float = 0.0, init_from: Path | None = None,
              rates: OracleRates = OracleRates(),
              progress: Callable[[int, int, float], None] | None = None) -> dict:
    """Phase 0 (`n_copy_steps`, none in the shipped build): copying names off the page (see
    `copy_steps`). Phase 1: packed facts (cheap tokens: sums, plus copying the most common of a
    numbered list and stamping verdicts, see `_fact`). Phase 2: one pass over role transcripts +
    chat-form facts + more packed facts (learns the roles' formats), and with `search_episodes`
    search transcripts, name facts and copy drills. With `shift_facts` every name fact comes
    after unrelated passages (see `name_fact_text`). One optimizer and one warmup+cosine
    schedule span all phases. `search_rate` sets how often the search oracle plays right
    (default `rates.solve`) and `unseen_search_errors` how many of its searcher turns are played
    wrong without being kept (the generator's evidence falls short, see `SearchOracleEngine`);
    `init_from` continues from a model built here before instead of
    fresh weights (a second stage: its own schedule, its build recorded under `init_from`)."""
    torch.manual_seed(seed)
    tok = build_tokenizer()
    # Loaded before the minutes of data, so a wrong path fails at once.
    start, source = _built_model(Path(init_from), tok) if init_from is not None else (None, None)
    task = ArithmeticTask()
    rng = random.Random(seed)
    phase1 = [packed_facts(task, fact_batch, 12, tok, seed * 100_003 + i) for i in range(fact_steps)]
    mix = _as_masked(transcripts(tok, task, episodes_per_workflow, rates, seed, role_functions, search_episodes,
                                 search_rate, unseen_search_errors))
    mix += chat_facts(task, n_chat_facts, tok, seed)
    mix += packed_facts(task, n_chat_facts // 12, 12, tok, seed + 7)
    if search_episodes:
        mix += copy_rows(4 * search_episodes, tok, seed + 13, shift_facts)
    plan = copy_steps(n_copy_steps, fact_batch, tok, seed + 17, shift_facts) + phase1 + _batches(mix, batch, rng)
    steps = len(plan)
    model = start if start is not None else build_model(tok, seed)  # fresh weights after the data, as always
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    warm = 30
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))))
    model.train()
    t0, loss_ema = time.time(), None
    for step, rows in enumerate(plan):
        loss = train_step(model, opt, sched, rows, tok.pad_token_id)
        loss_ema = loss.item() if loss_ema is None else 0.98 * loss_ema + 0.02 * loss.item()
        if progress:
            progress(step + 1, steps, loss_ema)
    out.mkdir(parents=True, exist_ok=True)
    model.eval()
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    info = {"fact_steps": fact_steps, "steps": steps, "batch": batch, "lr": lr, "seed": seed,
            "mix_examples": len(mix), "final_loss_ema": round(loss_ema or 0.0, 4),
            "seconds": round(time.time() - t0, 1), "params": sum(p.numel() for p in model.parameters()),
            # Weights are reproduced per library build: two venvs gave two bases from one command.
            "versions": {"torch": torch.__version__, "transformers": _version("transformers")},
            "rates": rates.__dict__, "episodes_per_workflow": episodes_per_workflow,
            # A search-only build plays none of them: say so, not the list it skipped.
            "workflows": [[n, o, w] for n, o, w in PRETRAINED] if episodes_per_workflow else [],
            "role_functions": role_functions,
            "chat_facts": n_chat_facts,
            **({"search_episodes": search_episodes, "search_world_people": SEARCH_WORLD_PEOPLE} if search_episodes else {}),
            **({"copy_steps": n_copy_steps} if n_copy_steps else {}),
            **({"shift_facts": True} if shift_facts else {}),
            **({"search_rate": search_rate} if search_rate is not None else {}),
            **({"unseen_search_errors": unseen_search_errors} if unseen_search_errors else {}),
            **({"init_from": {"path": str(init_from), "build": source}} if init_from is not None else {})}
    (out / "rolecall_base.json").write_text(json.dumps(info, indent=2))
    return info
