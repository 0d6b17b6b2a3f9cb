"""An exclusive, non-blocking lock on a checkpoint output directory, held for a whole run.

The lock is ``fcntl.flock`` on a sibling file ``.<name>.lock`` in the resolved directory's parent (not
inside the directory, which a save replaces as a whole; every alias of one directory names one lock). The
kernel releases it when the holder dies, so a crashed run never blocks the next one; the file itself stays
(it holds only the holder's pid). Locking is re-entrant within one process: the CLI holds it for the run
and the writer takes it again for the save.
Where ``fcntl`` does not exist (Windows) the lock is skipped with a warning.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import CheckpointFormatError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

_held: dict[Path, int] = {}
_held_fds: dict[Path, int] = {}
_guard = threading.Lock()


def lock_path(directory: str | os.PathLike[str]) -> Path:
    """The lock file of ``directory``: ``<parent>/.<name>.lock`` of the resolved path.

    Symlinks are resolved first (the directory itself and its parents), so ``--out link`` and ``--out``
    the link's target contend for one lock.
    """
    target = Path(directory).resolve()
    return target.with_name(f".{target.name}.lock")


class DirectoryLockedError(CheckpointFormatError):
    """Another process holds the lock of an output directory (names the directory and the holder's pid)."""


@contextmanager
def directory_lock(directory: str | os.PathLike[str]) -> Iterator[Path]:
    """Hold the exclusive lock of ``directory`` for the block; raises :class:`DirectoryLockedError` at once."""
    path = lock_path(directory)
    with _guard:
        if path not in _held:
            _acquire(path, Path(directory))
        _held[path] = _held.get(path, 0) + 1
    try:
        yield path
    finally:
        with _guard:
            _held[path] -= 1
            if _held[path] == 0:
                del _held[path]
                fd = _held_fds.pop(path, None)
                if fd is not None:
                    os.close(fd)


def _acquire(path: Path, directory: Path) -> None:
    if fcntl is None:  # pragma: no cover - Windows
        log.warning("%s: no fcntl on this platform; the output directory is not locked", directory)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        raise DirectoryLockedError(
            f"{directory}: another run (pid {holder}) is writing this directory (lock {path}); "
            "wait for it to finish or choose another output directory"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode("ascii"), 0)
    _held_fds[path] = fd
