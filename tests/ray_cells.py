"""Cell runners for the Ray grid tests. A module of its own so that Ray's worker processes
import it by name (PYTHONPATH points at tests/) instead of unpickling test code."""
from __future__ import annotations

import json
import os
import time

from grid_fakes import FakeRunner


class TimedFake(FakeRunner):
    """FakeRunner that takes `seconds`, records which process ran it and when, and kills its
    worker process outright for the cells in `crash` (a worker lost to the OOM killer)."""

    def __init__(self, rendezvous: str, fail=(), crash=(), seconds: float = 0.5):
        super().__init__(fail)
        self.rendezvous, self.crash, self.seconds = rendezvous, set(crash), seconds

    def __call__(self, job, on_event) -> None:
        t0 = time.time()
        if job.cell.name in self.crash:
            os._exit(9)
        # The first cells wait (up to 60 s) until two have started: if Ray runs two at once
        # they overlap whatever the workers' start-up times; if it does not, they cannot.
        open(os.path.join(self.rendezvous, job.cell.name), "w").close()
        while len(os.listdir(self.rendezvous)) < 2 and time.time() - t0 < 60:
            time.sleep(0.05)
        time.sleep(self.seconds)
        super().__call__(job, on_event)
        (job.path / "worker.json").write_text(json.dumps({"pid": os.getpid(), "start": t0, "end": time.time(),
                                                          "cwd": os.getcwd()}))
