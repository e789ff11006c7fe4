"""Trainers: `launch.train` hands a run to the trainer its config picks (`trainers/`). The RL
trainer is `stack` (what a run holds), `step` (one RL step), `loop` (the steps, validation,
checkpoints, stop) with `resume` and `session`; a trainer that another package registers runs
on `harness` (the run's parts with the LLM agents frozen, rollouts in process or on Ray actors)."""
