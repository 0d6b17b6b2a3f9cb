"""Per-thread CPU seconds of this process, for telling a serial run from a loaded machine.

CPU about equal to wall on a 2-core machine can mean one thread working or two threads sharing loaded
cores; the per-thread counters (``/proc/self/task/<tid>/stat``: user + system ticks) tell which, whatever
the load.
"""

from __future__ import annotations

import os
from pathlib import Path


def thread_cpu() -> dict[int, float]:
    """CPU seconds (user + system) of each of this process's live threads, by thread id."""
    ticks = os.sysconf("SC_CLK_TCK")
    seconds = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # a thread that ended meanwhile
            continue
        seconds[int(task.name)] = (int(fields[11]) + int(fields[12])) / ticks
    return seconds


def spent_by_thread(before: dict[int, float], after: dict[int, float]) -> list[float]:
    """The CPU seconds each thread spent between two :func:`thread_cpu` readings, largest first (threads that
    ended in between are missing)."""
    return sorted((after[t] - before.get(t, 0.0) for t in after), reverse=True)


def busiest_share(before: dict[int, float], after: dict[int, float]) -> float:
    """The busiest thread's share of the CPU seconds spent between two readings (1.0: one thread did all the
    work; 1/threads: evenly split)."""
    spent = spent_by_thread(before, after)
    total = sum(spent)
    return spent[0] / total if total > 0 else 1.0
