"""The per-module report (rows written as CSV or JSON) and a progress bar with time estimates."""

from __future__ import annotations

import csv
import json
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import IO, Any


@dataclass
class ModuleReport:
    """One quantized (or deliberately skipped) module.

    ``loss`` is the algorithm's reported loss (GPTQ: weighted reconstruction error; AWQ/RTN: mean squared
    weight error); ``tokens`` calibration tokens the module saw; ``damp`` GPTQ's damping fraction;
    ``fallback`` the strategy used instead of ``method`` and ``fallback_reason`` why; ``seconds`` the
    solve time and ``finalize_seconds`` the pack/offload/replace time, both wall seconds. ``bits`` and
    ``group_size`` are empty for weight-only families without integer codes (FP8, bitsandbytes, GGUF).
    """

    layer: int
    module: str
    method: str
    format: str
    bits: int | None
    group_size: int | None
    loss: float | None
    tokens: int
    damp: float | None
    expert: int | None
    fallback: str | None
    fallback_reason: str | None
    seconds: float
    finalize_seconds: float = 0.0
    notes: str = ""

    @classmethod
    def columns(cls) -> list[str]:
        return [f.name for f in fields(cls)]


def write_report_csv(rows: list[ModuleReport], path: str | Path) -> Path:
    """Write ``rows`` as CSV with a header row (empty cells for None)."""
    target = Path(path)
    with target.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=ModuleReport.columns())
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in asdict(row).items()})
    return target


def write_report_json(rows: list[ModuleReport], path: str | Path) -> Path:
    """Write ``rows`` as a JSON list of objects."""
    target = Path(path)
    target.write_text(json.dumps([asdict(r) for r in rows], indent=1), encoding="utf-8")
    return target


class Progress:
    """A text progress bar over plan steps: ``[####....] 3/8 layers  elapsed 4.1s  eta 6.8s``.

    The estimate is (elapsed / steps done this run) × steps left; steps restored from a checkpoint count
    as done but not in the rate.
    """

    def __init__(self, total: int, *, stream: IO[str] | None = None, width: int = 24, enabled: bool = True) -> None:
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.enabled = enabled
        self._start = time.perf_counter()
        self._first = 0
        self.done = 0

    def start(self, done: int) -> None:
        self._first = done
        self.done = done
        self._start = time.perf_counter()

    def eta(self) -> float | None:
        ran = self.done - self._first
        if ran <= 0:
            return None
        return (time.perf_counter() - self._start) / ran * (self.total - self.done)

    def advance(self, label: str = "") -> str:
        self.done += 1
        elapsed = time.perf_counter() - self._start
        eta = self.eta()
        filled = int(self.width * self.done / max(self.total, 1))
        line = (
            f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} layers"
            f"  elapsed {elapsed:.1f}s  eta {'?' if eta is None else f'{eta:.1f}s'}  {label}"
        )
        if self.enabled:
            self.stream.write(line.rstrip() + "\n")
            self.stream.flush()
        return line


def notes_text(notes: dict[str, Any]) -> str:
    """Notes as ``key=value`` pairs separated by ``; `` (stable order)."""
    return "; ".join(f"{k}={v}" for k, v in sorted(notes.items()))
