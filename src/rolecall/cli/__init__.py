"""`rolecall` command line: train, eval, make-base, report, inspect, grid, verify.

`root` builds `app` (the console script `rolecall.cli:app`) from the command modules, none of
which imports another's commands: `train`; `runs` (eval, export, generate, report, inspect);
`tools` (make-base, env, configs); the `grid` and `verify` groups. `common` holds what they
share: the error console and one-line user errors. The commands import their machinery
(torch, the trainer) only when they run, so `rolecall --help` stays fast.
"""
from rolecall.cli.root import app, main
from rolecall.cli.runs import json_safe

__all__ = ["app", "json_safe", "main"]
