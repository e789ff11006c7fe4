"""A scripted engine for tests and dry runs: answers come from a user function, no model."""
from __future__ import annotations

from typing import Callable

from rolecall.engines.base import GenOutput, GenRequest

Script = Callable[[GenRequest], str]


class ScriptedEngine:
    """Replies with `script(request)`; records every batch it was asked for."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.batches: list[list[GenRequest]] = []

    def generate(self, requests: list[GenRequest], *, temperature: float) -> list[GenOutput]:
        self.batches.append(list(requests))
        outs = []
        for r in requests:
            text = self.script(r)
            prompt = "\n".join(m["content"] for m in r.messages)
            outs.append(GenOutput(prompt_text=prompt, completion_text=text))
        return outs
