"""Role-level diagnostics: what each role's outputs look like, and alarms on drift.

The metrics and alarms follow "When Does Multi-Agent RL Improve LLM Workflows? Workflow,
Scale, and Policy-Sharing Tradeoffs" (arXiv 2605.24202)."""
