"""Hidden code tests as data: DeepCoder/TACO/LiveCodeBench JSON -> one checked `CodeTests`.

Two shapes exist in the wild and both are accepted:
- a list of `{"input", "output", "testtype"}` (`testtype`, or `type`, is `stdin`,
  `stdin_stdout` or `functional`); functional inputs are newline-separated JSON arguments
  and the output is one JSON value (DeepCoder's PrimeIntellect subset writes
  `{"type": "function_call", "fn_name", "input": [args], "output": [value]}`);
- `{"inputs": [...], "outputs": [...], "fn_name"?}`; with a function name each input is the
  argument list (or a JSON string of it) and each output the return value, without one
  inputs and outputs are stdin/stdout text (a list of lines is joined with newlines).

The function to call may be named by each test (`fn_name`, `func_name`, or `func_name` in
the test's `metadata`, an object or its JSON text, as LiveCodeBench and DeepCoder's lcbv5
subset write it), by the tests object of the second shape (the same keys), or by the
caller's `fn_name` (the row's `metadata.func_name`). The tests must agree on one name, and
if both the tests and the caller name it, the names must agree too: a mismatch is an
error, not a guess, because calling the wrong function would score every right program 0.

Nothing here executes anything; a malformed spec raises `TestSpecError` naming the reason,
so a bad dataset row is reported at load time instead of becoming a reward of 0.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

_STDIN_TYPES = {"stdin", "stdin_stdout", "stdio"}
_FUNCTIONAL_TYPES = {"functional", "function", "call", "function_call"}


class TestSpecError(ValueError):
    """The tests of a problem cannot be used; the message says why."""

    __test__ = False  # not a pytest test class


@dataclass(frozen=True)
class CodeTests:
    """Inputs and expected outputs of one problem's hidden tests.

    kind "stdin": inputs/outputs are program stdin/stdout texts.
    kind "functional": each input is a list of positional arguments, each output the
    expected return value (both plain JSON values); `fn_name` is the function to call.
    `prefix` and `suffix`: trusted code run before and after the model's program, as one
    program (`program(code)`); a task whose tests are code builds them, e.g. HumanEval's
    prompt before and a function that runs its `check(candidate)` after
    (`rolecall.tasks.humaneval`). Dataset rows never set them.
    """

    __test__ = False

    kind: Literal["stdin", "functional"]
    inputs: tuple[Any, ...]
    outputs: tuple[Any, ...]
    fn_name: str | None = None
    prefix: str = ""
    suffix: str = ""

    def __len__(self) -> int:
        return len(self.inputs)

    def program(self, code: str) -> str:
        """What the sandbox runs for the model's `code`: the prefix, the code, the suffix."""
        if not (self.prefix or self.suffix):
            return code
        return f"{self.prefix.rstrip()}\n\n{code.rstrip()}\n\n{self.suffix.lstrip()}"

    def to_json(self) -> dict[str, Any]:
        out = {"inputs": list(self.inputs), "outputs": list(self.outputs), "fn_name": self.fn_name}
        return {**out, "prefix": self.prefix, "suffix": self.suffix} if self.prefix or self.suffix else out


def parse_tests(raw: str | list | dict, fn_name: str | None = None) -> CodeTests:
    """Check and normalise one problem's tests (a JSON string or the decoded value).

    `fn_name` is the row-level function name (`metadata.func_name`), used when the tests
    name none themselves."""
    if isinstance(raw, (bytes, bytearray)):
        raw = raw.decode("utf-8", errors="strict")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as e:
            raise TestSpecError(f"tests are not valid JSON ({e.msg} at char {e.pos})") from None
    if isinstance(raw, list):
        tests = _from_list(raw, fn_name)
    elif isinstance(raw, dict):
        tests = _from_columns(raw, fn_name)
    else:
        raise TestSpecError(f"tests must be a list or an object, got {type(raw).__name__}")
    if not tests.inputs:
        raise TestSpecError("no tests: a problem without tests would pass any program")
    if tests.kind == "functional" and not (tests.fn_name and tests.fn_name.isidentifier()):
        raise TestSpecError("functional tests need a function name (fn_name / func_name / metadata.func_name "
                            f"in the tests or the row), got {tests.fn_name!r}")
    return tests


def _from_list(items: list, fn_name: str | None) -> CodeTests:
    kinds, inputs, outputs, names = set(), [], [], set()
    for i, t in enumerate(items):
        if not isinstance(t, dict):
            raise TestSpecError(f"test {i}: expected an object, got {type(t).__name__}")
        missing = [k for k in ("input", "output") if k not in t]
        if missing:
            raise TestSpecError(f"test {i}: missing {missing}")
        names |= _names_in(t, f"test {i}")
        ttype = str(t.get("testtype", t.get("type", "stdin"))).lower()
        if ttype in _STDIN_TYPES:
            kinds.add("stdin")
            inputs.append(_text(t["input"], f"test {i} input"))
            outputs.append(_text(t["output"], f"test {i} output"))
        elif ttype in _FUNCTIONAL_TYPES:
            kinds.add("functional")
            inputs.append(_json_args(t["input"], i))
            outputs.append(_json_value(t["output"], f"test {i} output"))
        else:
            raise TestSpecError(f"test {i}: unknown testtype {ttype!r}; allowed: stdin_stdout, functional")
    if len(kinds) > 1:
        raise TestSpecError("tests mix stdin and functional types")
    kind = kinds.pop() if kinds else "stdin"
    name = _one_name(names, fn_name)
    return CodeTests(kind, tuple(inputs), tuple(outputs), name if kind == "functional" else None)


def _from_columns(d: dict, fn_name: str | None) -> CodeTests:
    if "inputs" not in d or "outputs" not in d:
        raise TestSpecError(f"tests object needs 'inputs' and 'outputs', has {sorted(d)}")
    ins, outs = d["inputs"], d["outputs"]
    if not isinstance(ins, list) or not isinstance(outs, list):
        raise TestSpecError("'inputs' and 'outputs' must be lists")
    if len(ins) != len(outs):
        raise TestSpecError(f"{len(ins)} inputs but {len(outs)} outputs")
    name = _one_name(_names_in(d, "tests object"), fn_name)
    if name:
        args = []
        for i, a in enumerate(ins):
            a = _json_value(a, f"input {i}") if isinstance(a, str) else a
            if not isinstance(a, list):
                raise TestSpecError(f"input {i}: functional arguments must be a list, got {type(a).__name__}")
            args.append(a)
        return CodeTests("functional", tuple(args), tuple(outs), name)
    return CodeTests("stdin", tuple(_text(x, f"input {i}") for i, x in enumerate(ins)),
                     tuple(_text(x, f"output {i}") for i, x in enumerate(outs)))


def _names_in(obj: dict, what: str) -> set[str]:
    """Function names `obj` gives: `fn_name`, `func_name`, `metadata.func_name` (metadata may
    be JSON text; empty values count as absent). Different names in one place are an error."""
    names = {str(obj[k]) for k in ("fn_name", "func_name") if obj.get(k)}
    meta = obj.get("metadata")
    if isinstance(meta, str):
        meta = _json_value(meta, f"{what} metadata") if meta.strip() else None
    if meta is not None and not isinstance(meta, dict):
        raise TestSpecError(f"{what} metadata: expected an object, got {type(meta).__name__}")
    if meta and meta.get("func_name"):
        names.add(str(meta["func_name"]))
    if len(names) > 1:
        raise TestSpecError(f"{what} names different functions: {sorted(names)}")
    return names


def _one_name(test_names: set[str], fn_name: str | None) -> str | None:
    """The one function the tests call: theirs, else the row's; a disagreement is an error."""
    if len(test_names) > 1:
        raise TestSpecError(f"tests name different functions: {sorted(test_names)}")
    name = next(iter(test_names), None)
    if name and fn_name and name != fn_name:
        raise TestSpecError(f"the tests call {name!r} but the row's metadata.func_name is {fn_name!r}")
    return name or fn_name or None


def _text(v: Any, what: str) -> str:
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return "\n".join(v)
    if not isinstance(v, str):
        raise TestSpecError(f"{what}: expected text, got {type(v).__name__}")
    return v


def _json_value(v: Any, what: str) -> Any:
    if not isinstance(v, str):
        return v
    try:
        return json.loads(v)
    except json.JSONDecodeError as e:
        raise TestSpecError(f"{what}: not valid JSON ({e.msg})") from None


def _json_args(v: Any, i: int) -> list:
    """LiveCodeBench functional input: one JSON value per line, one line per argument."""
    if isinstance(v, list):
        return v
    if not isinstance(v, str):
        raise TestSpecError(f"test {i} input: expected text, got {type(v).__name__}")
    return [_json_value(line, f"test {i} input line {j}") for j, line in enumerate(v.splitlines()) if line.strip()]
