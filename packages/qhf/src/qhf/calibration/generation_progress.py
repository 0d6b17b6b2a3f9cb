"""Progress lines of the self-generation: one line per report, never a carriage-return bar, so logs stay readable.

The estimate is measured, not predicted: after the first decode step the time per step so far times the
steps left (every batch runs ``length - 1`` steps). Lines go to ``stream`` (stderr by default) after the
first step, then at most every :data:`INTERVAL` seconds, and after every batch.
"""

from __future__ import annotations

import sys
import time
from typing import IO

#: Seconds between two periodic lines (a batch's end always prints).
INTERVAL = 10.0


class GenerationProgress:
    """Counts decode steps over ``batches`` batches of ``steps_per_batch`` steps and prints estimates."""

    def __init__(self, rows: int, batches: int, steps_per_batch: int, *, stream: IO[str] | None = None) -> None:
        self.rows = rows
        self.total = batches * steps_per_batch
        self.stream = stream if stream is not None else sys.stderr
        self.done = 0
        self.rows_done = 0
        self._start = time.perf_counter()
        self._last = self._start

    def _write(self, text: str) -> None:
        self.stream.write(f"calibration: {text}\n")
        self.stream.flush()

    def _line(self, now: float) -> str:
        elapsed = now - self._start
        eta = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        return (
            f"generating: {self.rows_done}/{self.rows} rows, step {self.done}/{self.total}, "
            f"elapsed {elapsed:.1f}s, eta {eta:.1f}s"
        )

    def step(self) -> None:
        """One decode step done: the first one prints the first estimate, later ones every INTERVAL seconds."""
        self.done += 1
        now = time.perf_counter()
        if self.done == 1:
            per_step = now - self._start
            self._write(f"first step took {per_step:.2f}s: estimate {per_step * self.total:.0f}s for the generation")
            self._last = now
        elif now - self._last >= INTERVAL:
            self._write(self._line(now))
            self._last = now

    def batch(self, rows_done: int) -> None:
        """A batch finished; ``rows_done`` rows are complete."""
        self.rows_done = rows_done
        now = time.perf_counter()
        self._write(self._line(now))
        self._last = now
