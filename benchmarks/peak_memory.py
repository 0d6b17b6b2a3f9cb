"""The peak resident set of this process since it started, in bytes (``VmHWM`` of ``/proc/self/status``).

Not ``getrusage(RUSAGE_SELF).ru_maxrss``: Linux keeps that maximum across ``exec`` (the old address space's
high-water mark is folded into it), so a worker started by a parent that held a large model reports at least
the parent's resident set at the fork. Measured here: the 16-layer children of ``bench_qhf_memory_depth`` all
reported 1.29 GiB, exactly the parent's size after it built the model, while their own peak was 0.87 GiB.
``VmHWM`` belongs to the address space ``exec`` created, so it is the worker's own.
"""

from __future__ import annotations

from pathlib import Path


def _status_bytes(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise SystemExit(f"/proc/self/status has no {field} line: memory is measured on Linux only")


def peak_rss_bytes() -> int:
    """``VmHWM`` of this process, in bytes; refuses a system without it (the benchmarks need Linux)."""
    return _status_bytes("VmHWM")


def rss_bytes() -> int:
    """``VmRSS`` of this process (its resident set now), in bytes."""
    return _status_bytes("VmRSS")


def reset_peak() -> None:
    """Set ``VmHWM`` back to the current resident set (``/proc/self/clear_refs``), so that
    :func:`peak_rss_bytes` then reports the peak of what runs after."""
    Path("/proc/self/clear_refs").write_text("5")
