"""Role-level diagnostics: what each role's outputs look like, and alarms on drift (SPEC §6)."""
