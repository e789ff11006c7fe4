"""The deliberation meta-policy's trainer (`trainer.py`) and its five stages (`stages.py`).

It sits above `rolecall.train` as a client of its public API (`rolecall.train.harness.Harness`),
and the meta-policy's decision pieces it trains sit below the workflows (`rolecall.metapolicy`);
`rolecall.config` registers it with the trainer registry. docs/deliberation.md describes it.
"""
