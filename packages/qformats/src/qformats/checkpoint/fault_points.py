"""Named crash points of a checkpoint directory write, for fault-injection tests.

Every step of :func:`qformats.checkpoint.write_checkpoint` that renames, unlinks or fsyncs calls
:func:`reach` with a point name. Normally nothing happens. A crash test sets ``QFORMATS_FAULT`` to
``<point>`` or ``<point>#<n>`` in a writer process (read at each call, so a forked child can set it) and
the process sends itself SIGKILL the ``n``-th time (default the first) it reaches that point.
:func:`recording` lists the ``(point, n)`` pairs one write reaches, so a test can kill at every one.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import CheckpointFormatError

ENV_VAR = "QFORMATS_FAULT"

_counts: dict[str, int] = {}
_trace: list[tuple[str, int]] | None = None


def _selected() -> tuple[str, int] | None:
    value = os.environ.get(ENV_VAR, "").strip()
    if not value:
        return None
    point, _, hit = value.partition("#")
    if hit and not hit.isdigit():
        raise CheckpointFormatError(f"{ENV_VAR}: expected '<point>' or '<point>#<n>', found {value!r}")
    return point, int(hit) if hit else 1


def reach(point: str) -> None:
    """Count ``point``; die by SIGKILL when ``QFORMATS_FAULT`` selects this point and count."""
    selected = _selected()
    if selected is None and _trace is None:
        return
    count = _counts.get(point, 0) + 1
    _counts[point] = count
    if _trace is not None:
        _trace.append((point, count))
    if selected == (point, count):
        os.kill(os.getpid(), signal.SIGKILL)


@contextmanager
def recording() -> Iterator[list[tuple[str, int]]]:
    """Collect every ``(point, n)`` reached inside the block (counts start from zero)."""
    global _trace
    _counts.clear()
    _trace = []
    try:
        yield _trace
    finally:
        _trace = None
        _counts.clear()
