"""The composition root: the one place a validated config becomes running parts.

`team` builds the workflow and its routing, `checks` validates a config against what is installed,
`bases` loads the base models with their adapters and engines, and `parts.build_parts` puts them
together for every entry point: training, evaluation, export, generation, Ray actors, the grid.
"""
