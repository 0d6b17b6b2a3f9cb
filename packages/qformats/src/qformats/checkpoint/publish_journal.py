"""The journal that makes the two-rename fallback publish recoverable after a crash.

Where directories cannot be exchanged atomically, :mod:`.publish` replaces ``target`` in two renames
(``target -> .<name>.lowbit-old-<uuid>``, then ``staging -> target``). Before the first rename it writes
the journal ``<parent>/.<name>.lowbit-journal`` (durably: JSON naming the old and the staging directory),
and it removes the journal only once the old directory is gone. The next save of ``target`` calls
:func:`recover` under the directory lock before anything else, and puts things back from what it finds:

* the old directory present and ``target`` missing (killed between the renames): the old directory is
  renamed back to ``target`` and the ``INCOMPLETE`` marker the save wrote is removed; the staging
  directory (the unfinished new write) is deleted;
* both present (killed after the new one was published): every entry of the old directory other than the
  marker and the superseded weights must be present in ``target`` (the publish carried it over as a hard
  link); then the old directory is deleted. An entry that is not (a file the user added during the
  window) keeps the old directory where it is, with a warning naming it: nothing the save did not write
  is deleted;
* the old directory missing: the marker is removed from ``target`` if the crash left it there, and the
  staging directory is deleted.

Recovery is idempotent: a crash during it leaves the journal, and the next save runs it again.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from ..errors import CheckpointFormatError
from .durable_files import fsync_dir, write_file_durable

log = logging.getLogger(__name__)

JOURNAL_TAG = ".lowbit-journal"


def journal_path(target: Path) -> Path:
    """``<parent>/.<name>.lowbit-journal`` of a (resolved) target directory."""
    return target.with_name(f".{target.name}{JOURNAL_TAG}")


def write_journal(target: Path, old: Path, staging: Path) -> None:
    """Record, durably, the two directories a fallback publish of ``target`` is about to move."""
    data = {"target": target.name, "old": old.name, "staging": staging.name}
    write_file_durable(journal_path(target), json.dumps(data, sort_keys=True).encode("utf-8"))
    fsync_dir(target.parent)


def clear_journal(target: Path) -> None:
    """Remove the journal once the fallback publish (or a recovery) is complete."""
    journal_path(target).unlink(missing_ok=True)
    fsync_dir(target.parent)


def _read(target: Path) -> tuple[Path, Path] | None:
    path = journal_path(target)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise CheckpointFormatError(
            f"{path}: unreadable publish journal ({exc}); expected the JSON a fallback publish writes. "
            f"Check {target.parent} for a .{target.name}.lowbit-old-* directory holding the previous checkpoint"
        ) from None
    names = [data.get(key) if isinstance(data, dict) else None for key in ("old", "staging")]
    prefix = f".{target.name}."
    if not all(isinstance(n, str) and n.startswith(prefix) and Path(n).name == n for n in names):
        raise CheckpointFormatError(
            f"{path}: expected 'old' and 'staging' names of hidden siblings of {target.name}, found {data!r}"
        )
    return target.parent / str(names[0]), target.parent / str(names[1])


def _all_carried(old: Path, target: Path, marker: Callable[[str], bool], replaced: Callable[[str], bool]) -> list[str]:
    """Entries of ``old`` that the published ``target`` does not hold (marker and old weights excepted)."""
    return [
        entry.name
        for entry in sorted(old.iterdir())
        if not marker(entry.name) and not replaced(entry.name) and not os.path.lexists(target / entry.name)
    ]


def _unmark(target: Path, marker: Callable[[str], bool]) -> None:
    """Remove the marker (and its temporary) the interrupted save wrote into ``target``."""
    for entry in list(target.iterdir()):
        if marker(entry.name) and entry.is_file():
            entry.unlink()
    fsync_dir(target)


def recover(target: Path, marker: Callable[[str], bool], replaced: Callable[[str], bool]) -> None:
    """Finish or undo the fallback publish the journal of ``target`` records (see the module docstring).

    ``marker(name)`` says whether a top-level name is the ``INCOMPLETE`` marker (or its temporary);
    ``replaced(name)`` says whether a top-level name is a
    superseded weight file (shards, index) that a new write never carries over.
    """
    found = _read(target)
    if found is None:
        return
    old, staging = found
    if old.is_dir() and not os.path.lexists(target):
        log.warning("%s: an interrupted save had moved it to %s; restoring it", target, old)
        os.rename(old, target)
        fsync_dir(target.parent)
        _unmark(target, marker)
    elif old.is_dir():
        kept = _all_carried(old, target, marker, replaced)
        if kept:
            log.warning(
                "%s: holds %s, which the published %s lacks; left in place (move what you need, then delete it)",
                old, ", ".join(kept), target,
            )  # fmt: skip
        else:
            shutil.rmtree(old)
    elif target.is_dir():
        _unmark(target, marker)
    if staging.is_dir():
        shutil.rmtree(staging)
    clear_journal(target)
