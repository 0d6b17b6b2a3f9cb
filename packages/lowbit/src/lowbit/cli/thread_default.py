"""The torch CPU thread count ``lowbit`` uses when the user passes no ``--threads``.

On a shared machine the other users' work occupies cores: a torch/OpenMP region split over more threads than
free cores waits, at every barrier, for a thread the scheduler has parked (measured on the 2-core development
host under load: prefill layers 1.3x to 4x slower with 2 threads than with 1; see docs/cli.md). So the
default is the number of cores this process may run on minus the 1-minute load average, rounded, at least 1
and at most the core count: 2 on a quiet 2-core machine, 1 once another job keeps a core busy. An explicit
``OMP_NUM_THREADS`` is the user's choice and is left to torch. Only commands that write no checkpoint use it
(``lowbit.cli.main.LOAD_AWARE_COMMANDS``): a checkpoint's bits must not depend on the load at start.
"""

from __future__ import annotations

import os

OMP_ENV = "OMP_NUM_THREADS"


def default_threads(cores: int, load: float) -> int:
    """Threads for ``cores`` usable cores when ``load`` runnable tasks (1-minute average) are already busy."""
    return max(1, min(cores, int(cores - load + 0.5)))


def host_default_threads() -> int | None:
    """The default for this process now, or None when ``OMP_NUM_THREADS`` is set (torch's choice stands)."""
    if os.environ.get(OMP_ENV):
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average on this platform: use every core, as torch does
        load = 0.0
    return default_threads(cores, load)
