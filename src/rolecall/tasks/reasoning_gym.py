"""Problems from a reasoning-gym procedural dataset (`task.name=reasoning_gym`, `task.gym`).

`pip install 'rolecall[reasoning-gym]'`; reasoning-gym is imported only when this task is
used. `task.gym` names the dataset and `task.gym_options` holds its own options (the fields of
its config class). At config load each option is checked against the type its config class
declares (`check_options`: a bool must be true/false, an int a whole number, a float a finite
number, lists, tuples and Optional followed through), then by reasoning-gym itself.

Split. reasoning-gym draws item i of a dataset from `Random(seed + i)`. The validation problems
are the first n_val *distinct* questions among items 0, 1, 2, ... with seed `task.seed`: on a
small problem space (two-term one-digit sums: 200 questions in all) items repeat, and a repeated
validation question would count one problem twice. A space too small to give n_val distinct
questions within `MAX_DRAWS_PER_QUESTION` draws each is refused, naming how many it gave. The
training problems are items 0..gym_train_size-1 with a seed derived from `task.seed` by a hash,
moved if needed so that the two ranges of per-item seeds do not overlap; a training problem
whose question is also a validation question is dropped (the log counts them): validation never
appears in training. `question_space` counts the distinct questions a dataset makes in a number
of draws (what `rolecall compare screen` reports).

Each `Problem` carries what scoring needs in `meta`: `gym`, `gym_options` and `entry`, the
reasoning-gym entry (question, answer, metadata) as JSON data; the verifier
(`reward.name=reasoning_gym`) hands it to reasoning-gym's `score_answer` in a worker process.
An entry that is not JSON data, or whose gold answer scores differently after a JSON round trip
(arc_agi and rearc hold tuples their scorer compares), is refused when the problems are made.
"""
from __future__ import annotations

import dataclasses
import difflib
import enum
import hashlib
import json
import math
import types
import typing
from collections.abc import Sequence
from importlib import metadata
from typing import Any

from rolecall.tasks.source import TaskSource
from rolecall.types import Problem

INSTALL = "pip install 'rolecall[reasoning-gym]'"
LIST_THEM = "python -c \"import reasoning_gym; print(sorted(reasoning_gym.factory.DATASETS))\""
RESERVED = ("seed", "size")  # rolecall's: the split
# Validation draws at most this many items per distinct question wanted before calling the space too small
# (two-term one-digit chain_sum gives its 200th distinct question after about 1,300 draws).
MAX_DRAWS_PER_QUESTION = 50
_SALT = "rolecall reasoning_gym training seed"


def _gym():
    """The reasoning_gym package, or ValueError naming the extra to install."""
    try:
        import reasoning_gym  # only when this task is used: `import rolecall` and other tasks never load it
    except ImportError:
        raise ValueError(f"task.name=reasoning_gym needs the reasoning-gym package: {INSTALL}") from None
    return reasoning_gym


def split_seeds(seed: int, n_val: int, train_size: int) -> tuple[int, int]:
    """(validation seed, training seed): distinct, with disjoint per-item seed ranges
    [seed, seed + n_val) and [train, train + train_size)."""
    train = int.from_bytes(hashlib.sha256(f"{_SALT}:{seed}".encode()).digest()[:4], "big")
    if train < seed + n_val and seed < train + train_size:  # the ranges overlap: start after validation's
        train = seed + n_val
    return seed, train


def dataset(gym: str, options: dict, seed: int, size: int):
    """The reasoning-gym dataset, or ValueError naming task.gym or task.gym_options."""
    rg = _gym()
    known = sorted(rg.factory.DATASETS)
    if gym not in known:
        close = difflib.get_close_matches(gym, known, n=5, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}? " if close else f"e.g. {', '.join(known[:6])}; "
        raise ValueError(f"task.gym: unknown reasoning-gym dataset {gym!r}; {hint}"
                         f"all {len(known)} of them: {LIST_THEM}")
    reserved = sorted(set(options) & set(RESERVED))
    if reserved:
        raise ValueError(f"task.gym_options: {reserved} are set by rolecall (validation: task.seed and task.n_val; "
                         "training: a seed derived from task.seed and task.gym_train_size); remove them")
    check_options(gym, rg.factory.DATASETS[gym][1], options)
    try:
        return rg.create_dataset(gym, **options, seed=seed, size=size)
    except Exception as e:  # noqa: BLE001 - reasoning-gym's own refusal, named by the field at fault
        fields = sorted(getattr(rg.factory.DATASETS[gym][1], "__dataclass_fields__", {}))
        allowed = ", ".join(f for f in fields if f not in RESERVED)
        raise ValueError(f"task.gym_options: reasoning-gym refused {options} for {gym!r}: "
                         f"{type(e).__name__}: {e}; its options: {allowed}") from None


def check_options(gym: str, config_cls: type, options: dict) -> None:
    """Every option is a field of the dataset's config class and has the type the field declares;
    ValueError naming `task.gym_options.<name>`, the value and the type otherwise.

    reasoning-gym does not check types itself: `allow_negation: "no"` would be read as true and
    `min_digits: 1.5` would fail deep in its generator."""
    fields = {f.name: f for f in dataclasses.fields(config_cls)} if dataclasses.is_dataclass(config_cls) else {}
    if not fields:
        return  # not a dataclass: reasoning-gym's own checks are all there is
    try:
        hints = typing.get_type_hints(config_cls)
    except Exception:  # noqa: BLE001 - an annotation that does not resolve: no type to check against
        hints = {}
    allowed = [f for f in fields if f not in RESERVED]
    for name, value in options.items():
        if name not in fields:
            close = difflib.get_close_matches(str(name), allowed, n=3, cutoff=0.6)
            hint = f"did you mean {', '.join(close)}? " if close else ""
            raise ValueError(f"task.gym_options.{name}: unknown option of {gym!r}; {hint}its options: "
                             f"{', '.join(allowed)}")
        if name in hints and not (_fits(value, hints[name]) or _like_default(value, fields[name], hints[name])):
            raise ValueError(f"task.gym_options.{name}: {value!r} is not {_type_words(hints[name])} "
                             f"(the type of {config_cls.__name__}.{name} in reasoning-gym)")


def _like_default(value: Any, field: dataclasses.Field, hint: Any) -> bool:
    """Where a field's own default does not fit its annotation (a few reasoning-gym fields are
    annotated loosely: `symbols: tuple = "x"`, `diff_ub: int = 0.2`), a value of the default's
    type passes too."""
    default = field.default
    if default is dataclasses.MISSING or default is None or _fits(default, hint) or type(value) is not type(default):
        return False
    return not isinstance(value, float) or math.isfinite(value)


def _fits(value: Any, hint: Any) -> bool:
    """Whether plain data (as YAML or JSON gives it) fits a dataclass field's annotation. A
    type this cannot judge (a nested config class, a date, an enum's members) is let through:
    reasoning-gym checks those."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or isinstance(hint, typing.TypeVar):
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if hint is type(None):
        return value is None
    if origin is typing.Literal:
        return any(type(value) is type(a) and value == a for a in args)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if hint is str:
        return isinstance(value, str)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return True
    if hint in (list, tuple) or origin in (list, tuple) or (
            origin is not None and isinstance(origin, type) and issubclass(origin, Sequence) and origin is not str):
        if not isinstance(value, (list, tuple)):
            return False  # YAML gives a list for a tuple; a string is no sequence of options
        if not args:
            return True
        if origin is tuple and len(args) > 1 and args[-1] is not Ellipsis:
            return len(value) == len(args) and all(_fits(v, a) for v, a in zip(value, args))
        return all(_fits(v, args[0]) for v in value)  # list[X], Sequence[X], tuple[X, ...] (and tuple[X] as used)
    if origin is dict or hint is dict:
        return isinstance(value, dict) and (not args or all(_fits(v, args[1]) for v in value.values()))
    return True


def _type_words(hint: Any) -> str:
    """An annotation as a user reads it: `a whole number (int)`, `true or false (bool)`, `a list of str`."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        words = [_type_words(a) for a in args if a is not type(None)]
        return " or ".join(words) + (" or null" if type(None) in args else "")
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    simple = {bool: "true or false (bool)", int: "a whole number (int)", float: "a finite number (float)",
              str: "a string (str)", list: "a list", tuple: "a list", dict: "a mapping"}
    if hint in simple:
        return simple[hint]
    if origin is dict:
        return "a mapping"
    if origin is tuple and len(args) > 1 and args[-1] is not Ellipsis:
        return f"a list of {len(args)} ({', '.join(_short(a) for a in args)})"
    if origin is not None and args:
        return f"a list of {_short(args[0])}"
    return _short(hint)


def _short(hint: Any) -> str:
    return getattr(hint, "__name__", None) if isinstance(hint, type) else str(hint).replace("typing.", "")


def make_entries(gym: str, options: dict, seed: int, size: int, split: str) -> list[dict]:
    """The first `size` entries of the dataset as JSON data; ValueError if one is not (`split`
    names them in the message)."""
    ds = dataset(gym, options, seed, size)
    out = [_as_json(gym, ds[i], i, split) for i in range(size)]
    if out:
        _check_round_trip(gym, ds, ds[0], out[0], split)
    return out


def distinct_entries(gym: str, options: dict, seed: int, wanted: int) -> tuple[list[tuple[int, dict]], int]:
    """The first `wanted` entries with distinct questions among items 0, 1, ... of the seed-`seed`
    dataset, as (item index, JSON entry), and how many items were drawn; ValueError naming
    task.n_val when the space gives fewer within `MAX_DRAWS_PER_QUESTION` x `wanted` draws."""
    cap = max(MAX_DRAWS_PER_QUESTION * wanted, 1000)
    ds, seen, out = dataset(gym, options, seed, cap), set(), []
    for i in range(cap):
        entry = ds[i]
        if entry["question"] in seen:
            continue
        seen.add(entry["question"])
        out.append((i, _as_json(gym, entry, i, "validation")))
        if len(out) == wanted:
            _check_round_trip(gym, ds, ds[out[0][0]], out[0][1], "validation")
            return out, i + 1
    raise ValueError(f"task.n_val={wanted}: reasoning-gym {gym!r} with options {options} made only {len(out)} "
                     f"distinct questions in {cap:,} draws; lower task.n_val to at most {len(out)} (leaving some "
                     "for training) or widen task.gym_options")


def question_space(gym: str, options: dict, draws: int = 5000, seed: int = 0) -> dict:
    """How many distinct questions `draws` items of the dataset hold, and whether the count had stopped
    growing (no new question in the last fifth of the draws: then it is about the whole space)."""
    ds, seen, last_new = dataset(gym, options, seed, draws), set(), 0
    for i in range(draws):
        q = ds[i]["question"]
        if q not in seen:
            seen.add(q)
            last_new = i
    return {"draws": draws, "distinct": len(seen), "saturated": last_new < 0.8 * draws}


def _as_json(gym: str, entry: dict, i: int, split: str) -> dict:
    try:
        return json.loads(json.dumps(entry, allow_nan=False))
    except (TypeError, ValueError) as e:
        raise ValueError(f"task.gym: {gym!r} {split} item {i} is not JSON data ({e}); rolecall stores each "
                         "entry with its problem and scores it in a worker process, so this dataset cannot "
                         "be used") from None


def _check_round_trip(gym: str, ds, made: dict, stored: dict, split: str) -> None:
    if stored.get("answer") is None:
        return
    before, after = ds.score_answer(made["answer"], made), ds.score_answer(stored["answer"], stored)
    if before != after:
        raise ValueError(f"task.gym: {gym!r} entries do not survive JSON (the gold answer of {split} item 0 "
                         f"scores {before} as generated and {after} after a JSON round trip), so rolecall "
                         "cannot score them in its worker; pick another dataset")


def make_problem(gym: str, options: dict, seed: int, i: int, entry: dict) -> Problem:
    """Item `i` of the dataset drawn with `seed` as a Problem: uid `GYM/SEED/INDEX`, and in `meta`
    what the verifier needs to score it (also used by `rolecall verify reasoning_gym`)."""
    answer = entry.get("answer")
    return Problem(uid=f"{gym}/{seed}/{i}", prompt=str(entry["question"]),
                   answer="" if answer is None else str(answer),
                   meta={"kind": "reasoning_gym", "gym": gym, "gym_options": options, "entry": entry})


def _problems(cfg, count_tokens=None, log=print):
    t = cfg.task
    options = dict(t.gym_options)
    drawn, draws = distinct_entries(t.gym, options, t.seed, t.n_val)
    val_seed, train_seed = split_seeds(t.seed, draws, t.gym_train_size)  # every drawn item's seed is validation's
    val = [make_problem(t.gym, options, val_seed, i, e) for i, e in drawn]
    seen = {p.prompt for p in val}
    train = [make_problem(t.gym, options, train_seed, i, e)
             for i, e in enumerate(make_entries(t.gym, options, train_seed, t.gym_train_size, "training"))]
    kept = [p for p in train if p.prompt not in seen]
    if not kept:
        raise ValueError(f"task.gym: every one of the {len(train)} training questions of {t.gym!r} is also a "
                         f"validation question (the problem space is that small); widen task.gym_options or "
                         "lower task.n_val")
    log(f"reasoning_gym {t.gym}: {len(val)} validation problems, distinct (seed={val_seed}, {draws} drawn), "
        f"{len(kept)} training problems "
        f"(seed={train_seed}, {t.gym_train_size} made, {len(train) - len(kept)} dropped as validation questions)")
    return kept, val


def _identity(cfg) -> dict:
    t = cfg.task
    options = json.dumps(t.gym_options, sort_keys=True)
    try:  # the generators are reasoning-gym's code: another version may make other problems
        version = metadata.version("reasoning-gym")
    except metadata.PackageNotFoundError:
        version = "not installed"
    return {"path": f"reasoning-gym {version}",
            "task": f"reasoning_gym {t.gym} options={options} n_val={t.n_val} "
                    f"train_size={t.gym_train_size} seed={t.seed}"}


def _check(cfg) -> None:
    t = cfg.task
    if not t.gym:
        raise ValueError(f"task.gym: required when task.name is 'reasoning_gym' (e.g. task.gym=basic_arithmetic; "
                         f"all of them: {LIST_THEM})")
    dataset(t.gym, dict(t.gym_options), t.seed, 1)


TASK = TaskSource("reasoning_gym", _problems, _identity, reward="reasoning_gym", check=_check)
