"""The run's memory: what it holds, what the machine has left, a warning before the OOM killer.

Every step row gets `mem/rss_gb` (resident now), `mem/peak_gb` (the process's peak so far),
`mem/available_gb` (what the machine has left) and `mem/micro_batch_tokens` (the token budget
of one forward/backward, `algo.memory`), so each result carries its memory.
When the machine's available memory falls below `LOW_SHARE` of its total (or `LOW_FLOOR`),
the run says so once, with what to lower, before a larger step gets it killed.

Between the rollout and the update the process hands its freed heap back to the system
(`give_back`, glibc's `malloc_trim`): without it the update's freed activations stayed
resident through the next rollout and the two phases' peaks stacked (2.0 GB held after a
SmolLM2 update, 0.9 GB after the trim). And from the start every allocation of a few MB or
more gets its own mapping (`bound_heap`), so a long decode loop does not grow the heap.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import resource
import sys

LOW_SHARE = 0.10
LOW_FLOOR = 1 << 30


def _kib_fields(path: str, names: tuple[str, ...]) -> dict[str, int]:
    """`Name:   123 kB` lines of a /proc file, in bytes; {} where it cannot be read."""
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        key, _, rest = line.partition(":")
        if key in names and rest.split():
            out[key] = int(rest.split()[0]) * 1024
    return out


def resident() -> tuple[int | None, int]:
    """(bytes resident now or None, the process's peak resident bytes)."""
    s = _kib_fields("/proc/self/status", ("VmRSS", "VmHWM"))
    peak = s.get("VmHWM")
    if peak is None:  # ru_maxrss: KiB on Linux, bytes on macOS
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    return s.get("VmRSS"), peak


def machine() -> tuple[int, int] | None:
    """(total, available) bytes of the machine's memory, or None where /proc/meminfo is missing."""
    m = _kib_fields("/proc/meminfo", ("MemTotal", "MemAvailable"))
    return (m["MemTotal"], m["MemAvailable"]) if len(m) == 2 else None


@functools.cache
def _libc():
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def give_back() -> None:
    """Return the heap's free pages to the system (glibc; elsewhere nothing)."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is not None:
        trim(0)


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
HEAP_MMAP_BYTES = 4 << 20


@functools.cache
def bound_heap() -> bool:
    """Serve every allocation of HEAP_MMAP_BYTES or more from its own mapping, returned to the
    system when it is freed (glibc; True where it took effect).

    glibc's default raises this threshold as the program frees large blocks (up to 32 MB), after
    which tensors of a few MB come from the heap, and a decode loop, whose temporaries grow by a
    position every step, leaves the heap fragmented faster than it reuses it: on SmolLM2 a
    100-row generate call of 48 tokens grew from 1.1 to 2.4 GB resident while holding 0.4 GB of
    tensors, and held 1.2 GB with the threshold fixed at 4 MB. A fixed threshold also stops
    the adjustment. A MALLOC_MMAP_THRESHOLD_ the user set is left as it is."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    return set_mmap_threshold(HEAP_MMAP_BYTES)


def set_mmap_threshold(nbytes: int) -> bool:
    """glibc's mmap threshold, fixed at `nbytes` (True where glibc took it)."""
    mallopt = getattr(_libc(), "mallopt", None)
    return bool(mallopt(M_MMAP_THRESHOLD, nbytes)) if mallopt is not None else False


class MemoryWatch:
    """Adds the memory figures to each step row; one warning when the machine runs low."""

    def __init__(self, hint: str = "", micro_batch_tokens: int | None = None) -> None:
        self.hint = hint
        self.micro_batch_tokens = micro_batch_tokens  # what the run's model trains with (`algo.memory`)
        self.warned = False

    def observe(self, row: dict) -> str | None:
        if self.micro_batch_tokens is not None:
            row["mem/micro_batch_tokens"] = self.micro_batch_tokens
        rss, peak = resident()
        if rss is not None:
            row["mem/rss_gb"] = round(rss / 1e9, 3)
        row["mem/peak_gb"] = round(peak / 1e9, 3)
        have = machine()
        if have is None:
            return None
        total, available = have
        row["mem/available_gb"] = round(available / 1e9, 3)
        if self.warned or available >= max(LOW_FLOOR, LOW_SHARE * total):
            return None
        self.warned = True
        return (f"warning: memory: this run peaked at {peak / 1e9:.1f} GB and the machine has "
                f"{available / 1e9:.1f} GB of {total / 1e9:.1f} GB left; a larger step may be killed by the "
                f"kernel's OOM killer. {self.hint}".rstrip())
