"""Named fault-injection points for crash tests.

The store calls ``faults.reach(point)`` at every step of a write. Normally the hook is :data:`NO_FAULTS` and
does nothing. A crash test sets ``QCHECKPOINT_FAULT=<point>`` or ``<point>#<n>`` in a writer subprocess; the
store reads it when constructed (never at import) and the process sends itself SIGKILL the n-th time (default
the first) it reaches that point, so each point of a commit is hit deterministically.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping

from .errors import CheckpointConfigError

ENV_VAR = "QCHECKPOINT_FAULT"

#: Every point the store reaches, in the order a commit reaches them.
POINTS: tuple[str, ...] = (
    "object.temp_created",  # temporary object file created, nothing written
    "object.mid_write",  # half of the object's bytes written to the temporary
    "object.before_fsync",  # all bytes written and flushed, not fsynced
    "object.after_fsync",  # temporary fsynced, not renamed
    "object.after_rename",  # renamed to objects/<sha>
    "commit.objects_verified",  # referenced objects verified, objects/ not yet fsynced
    "commit.objects_synced",  # objects/ fsynced, manifest not yet written
    "commit.manifest_written",  # manifest object renamed and objects/ fsynced; CURRENT untouched
    "current.temp_created",  # CURRENT temporary created
    "current.mid_write",  # half of the new CURRENT written to the temporary
    "current.before_fsync",  # new CURRENT written and flushed, not fsynced
    "current.after_fsync",  # new CURRENT temporary fsynced, not yet replacing CURRENT
    "current.after_replace",  # CURRENT replaced, root directory not yet fsynced
    "current.after_dirsync",  # CURRENT replaced and root fsynced: the generation is published
    "collect.started",  # garbage collection began
    "collect.mid_delete",  # garbage collection deleted its first file
)

#: Points reached only after the new CURRENT has replaced the old one.
PUBLISHED_POINTS = frozenset(
    {"current.after_replace", "current.after_dirsync", "collect.started", "collect.mid_delete"}
)


class FaultHook:
    """Kills the current process with SIGKILL the ``hit``-th time ``point`` is reached; ``point=None`` is inert."""

    def __init__(self, point: str | None = None, hit: int = 1) -> None:
        if point is not None and point not in POINTS:
            raise CheckpointConfigError(
                f"{ENV_VAR}: unknown fault point {point!r}; expected one of {', '.join(POINTS)}"
            )
        if hit < 1:
            raise CheckpointConfigError(f"{ENV_VAR}: hit count must be >= 1, found {hit}")
        self.point = point
        self.hit = hit
        self.counts: dict[str, int] = {}

    def reach(self, point: str) -> None:
        """Record that ``point`` was reached; die there if it is the selected point and hit."""
        if self.point is None:
            return
        count = self.counts.get(point, 0) + 1
        self.counts[point] = count
        if point == self.point and count == self.hit:
            os.kill(os.getpid(), signal.SIGKILL)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> FaultHook:
        """Parse ``QCHECKPOINT_FAULT`` (``point`` or ``point#n``); inert when unset or empty."""
        value = (os.environ if environ is None else environ).get(ENV_VAR, "").strip()
        if not value:
            return NO_FAULTS
        point, _, hit = value.partition("#")
        if hit and not hit.isdigit():
            raise CheckpointConfigError(f"{ENV_VAR}: expected '<point>' or '<point>#<n>', found {value!r}")
        return cls(point, int(hit) if hit else 1)


NO_FAULTS = FaultHook()
