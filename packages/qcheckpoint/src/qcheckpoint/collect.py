"""Garbage collection after publication: unreachable objects and stray temporaries.

Reachable = every generation CURRENT lists, plus the continuation and artifacts its manifest names, plus the
objects pinned by the caller (put since the last commit). If CURRENT or any listed manifest cannot be read the
collection stops without deleting anything (fail safe). Failures are logged as warnings and reported; they
never raise, so a failed collection cannot turn a durable commit into a failed one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .durable_io import is_temp_name
from .errors import CheckpointError
from .faults import FaultHook
from .objects import ObjectStore, is_object_name
from .records import Manifest

logger = logging.getLogger("qcheckpoint")


@dataclass
class CollectReport:
    """What a collection removed (object names, temporary paths, bytes freed) and the errors it met."""

    removed_objects: list[str] = field(default_factory=list)
    removed_temporaries: list[str] = field(default_factory=list)
    freed_bytes: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the collection met no error."""
        return not self.errors


def _reachable(objects: ObjectStore, read_current: Callable[[], list[str] | None]) -> set[str]:
    reachable: set[str] = set()
    for generation in read_current() or []:
        where = f"generation {generation} manifest"
        manifest = Manifest.decode(objects.read(generation, where), where)
        reachable.add(generation)
        reachable |= manifest.objects()
    return reachable


def _remove(path: Path, report: CollectReport, faults: FaultHook) -> int:
    size = path.stat().st_size
    path.unlink()
    faults.reach("collect.mid_delete")
    report.freed_bytes += size
    return size


def collect_unreachable(
    root: Path,
    objects: ObjectStore,
    read_current: Callable[[], list[str] | None],
    pinned: set[str],
    faults: FaultHook,
) -> CollectReport:
    """Delete unreachable objects and stray temporaries under ``root``; see the module docstring."""
    report = CollectReport()
    try:
        faults.reach("collect.started")
        keep = _reachable(objects, read_current) | pinned
        for entry in os.scandir(objects.directory):
            if is_object_name(entry.name) and entry.name not in keep:
                _remove(Path(entry.path), report, faults)
                objects.verified.pop(entry.name, None)
                report.removed_objects.append(entry.name)
            elif is_temp_name(entry.name):
                _remove(Path(entry.path), report, faults)
                report.removed_temporaries.append(entry.path)
        for entry in os.scandir(root):
            if is_temp_name(entry.name) and entry.is_file(follow_symlinks=False):
                _remove(Path(entry.path), report, faults)
                report.removed_temporaries.append(entry.path)
    except (OSError, CheckpointError) as exc:
        report.errors.append(f"{type(exc).__name__}: {exc}")
        logger.warning("qcheckpoint: garbage collection in %s stopped early (the commit stands): %s", root, exc)
    return report
