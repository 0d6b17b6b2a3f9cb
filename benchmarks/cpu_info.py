"""The line that names this machine's CPU in every benchmark table (bf16/AMX speed depends on the flags)."""

from __future__ import annotations

import os
from pathlib import Path

#: Instruction-set flags that change the speed of the kernels the benchmarks time.
FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile")


def cpu_line() -> str:
    """``model name`` from ``/proc/cpuinfo``, the logical CPU count and which of :data:`FLAGS` it has."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return f"unknown CPU (no /proc/cpuinfo; {os.cpu_count()} logical CPUs)"
    lines = text.splitlines()
    name = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), "?")
    flags = set(next((ln.split(":", 1)[1].split() for ln in lines if ln.startswith("flags")), []))
    present = ", ".join(f for f in FLAGS if f in flags) or "none of " + "/".join(FLAGS)
    return f"{name} ({present}; {os.cpu_count()} logical CPUs)"
