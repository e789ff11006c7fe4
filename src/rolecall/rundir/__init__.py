"""A run directory and its safety: checkpoints, the resume fingerprint, the lock, stop requests, metric sinks, core sharing, halting guards."""
