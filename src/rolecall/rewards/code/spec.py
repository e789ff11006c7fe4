"""Hidden code tests as data: DeepCoder/TACO/LiveCodeBench JSON -> one checked `CodeTests`.

Two shapes exist in the wild and both are accepted:
- a list of `{"input", "output", "testtype"}` (`testtype`, or `type`, is `stdin`,
  `stdin_stdout` or `functional`); functional inputs are newline-separated JSON arguments
  and the output is one JSON value; the function name comes from `fn_name` (the row's
  `metadata.func_name`), or from a per-test `fn_name` (DeepCoder's PrimeIntellect subset
  writes `{"type": "function_call", "fn_name", "input": [args], "output": [value]}`);
- `{"inputs": [...], "outputs": [...], "fn_name"?}`; with `fn_name` each input is the
  argument list (or a JSON string of it) and each output the return value, without it
  inputs and outputs are stdin/stdout text (a list of lines is joined with newlines).

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
    """

    __test__ = False

    kind: Literal["stdin", "functional"]
    inputs: tuple[Any, ...]
    outputs: tuple[Any, ...]
    fn_name: str | None = None

    def __len__(self) -> int:
        return len(self.inputs)

    def to_json(self) -> dict[str, Any]:
        return {"inputs": list(self.inputs), "outputs": list(self.outputs), "fn_name": self.fn_name}


def parse_tests(raw: str | list | dict, fn_name: str | None = None) -> CodeTests:
    """Check and normalise one problem's tests (a JSON string or the decoded value)."""
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
        raise TestSpecError(f"functional tests need a function name (fn_name / metadata.func_name), got {tests.fn_name!r}")
    return tests


def _from_list(items: list, fn_name: str | None) -> CodeTests:
    kinds, inputs, outputs = set(), [], []
    names = {t["fn_name"] for t in items if isinstance(t, dict) and t.get("fn_name")}
    if len(names) > 1:
        raise TestSpecError(f"tests name different functions: {sorted(names)}")
    fn_name = names.pop() if names else fn_name
    for i, t in enumerate(items):
        if not isinstance(t, dict):
            raise TestSpecError(f"test {i}: expected an object, got {type(t).__name__}")
        missing = [k for k in ("input", "output") if k not in t]
        if missing:
            raise TestSpecError(f"test {i}: missing {missing}")
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
    return CodeTests(kind, tuple(inputs), tuple(outputs), fn_name if kind == "functional" else None)


def _from_columns(d: dict, fn_name: str | None) -> CodeTests:
    if "inputs" not in d or "outputs" not in d:
        raise TestSpecError(f"tests object needs 'inputs' and 'outputs', has {sorted(d)}")
    ins, outs = d["inputs"], d["outputs"]
    if not isinstance(ins, list) or not isinstance(outs, list):
        raise TestSpecError("'inputs' and 'outputs' must be lists")
    if len(ins) != len(outs):
        raise TestSpecError(f"{len(ins)} inputs but {len(outs)} outputs")
    name = d.get("fn_name") or fn_name
    if name:
        args = []
        for i, a in enumerate(ins):
            a = _json_value(a, f"input {i}") if isinstance(a, str) else a
            if not isinstance(a, list):
                raise TestSpecError(f"input {i}: functional arguments must be a list, got {type(a).__name__}")
            args.append(a)
        return CodeTests("functional", tuple(args), tuple(outs), str(name))
    return CodeTests("stdin", tuple(_text(x, f"input {i}") for i, x in enumerate(ins)),
                     tuple(_text(x, f"output {i}") for i, x in enumerate(outs)))


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
