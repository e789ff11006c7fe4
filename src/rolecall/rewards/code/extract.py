"""Find the program in a completion: the last closed fenced Python (or untagged) code block."""
from __future__ import annotations

import re

from rolecall.parsing import strip_think

# An opening fence: three or more backticks and an optional language tag (the rest of the
# info string is ignored). A closing fence has at least as many backticks and nothing else.
_OPEN = re.compile(r"^[ \t]{0,3}(`{3,})[ \t]*([^\s`]*)[^`]*$")
_CLOSE = re.compile(r"^[ \t]{0,3}(`{3,})[ \t]*$")
# Blocks tagged with another language (```text, ```bash, ```cpp) are sample outputs or
# programs we cannot run; they are skipped rather than executed as Python.
_PYTHON_TAGS = {"", "python", "py", "python3", "py3"}


def extract_code(completion: str) -> str | None:
    """Content of the last closed ```python / ```py / ``` block after any think block, or None.

    A trailing fence that is never closed (a truncated generation) is ignored, so the
    previous complete block wins; blocks tagged with another language are skipped.
    """
    last: str | None = None
    fence, tag, body = None, "", []
    for line in strip_think(completion).splitlines():
        if fence is None:
            m = _OPEN.match(line)
            if m:
                fence, tag, body = m.group(1), m.group(2).lower(), []
            continue
        m = _CLOSE.match(line)
        if m and len(m.group(1)) >= len(fence):
            if tag in _PYTHON_TAGS:
                last = "\n".join(body) + "\n"
            fence = None
        else:
            body.append(line)
    return last
