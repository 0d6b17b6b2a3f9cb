"""Opening files of a directory safely: resolved first, inside the directory, regular, never blocking.

Every reader of a checkpoint or model directory opens its files through these functions:

* :func:`contained_path` resolves ``root / name`` (symlinks followed) and refuses it when it lies outside
  the resolved ``root``. One exception: a directory that is a snapshot of the Hugging Face hub cache
  (``.../snapshots/<revision>``) stores its files as symlinks into the same repository's ``blobs``
  directory (``../../blobs``), which is accepted as part of the directory.
* :func:`require_regular` refuses a path that is not a regular file (a FIFO, a device, a socket, a
  directory) from its ``stat`` alone, so a FIFO named as a shard is never opened (opening one blocks).
* :func:`open_regular` opens with ``O_NONBLOCK`` and checks the opened file again with ``fstat``, so a
  file swapped for a FIFO between the check and the open is refused rather than blocked on.

Each refusal is an :class:`~qformats.errors.UnsafeFileError` naming the file and what was expected.
"""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

from .errors import UnsafeFileError

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _allowed_roots(root: Path) -> tuple[Path, ...]:
    """The resolved ``root``, plus its hub-cache ``blobs`` directory when ``root`` is a cache snapshot."""
    real = root.resolve()
    if real.parent.name == "snapshots":
        return real, real.parent.parent / "blobs"
    return (real,)


def contained_path(root: Path, name: str) -> Path:
    """The resolved ``root / name``, refused (naming both) when it lies outside ``root``."""
    path = root / name
    real = path.resolve()
    roots = _allowed_roots(root)
    if not any(real == r or r in real.parents for r in roots):
        raise UnsafeFileError(
            f"{path}: a symlink to {real}, outside the checkpoint or model directory {roots[0]}; expected the file "
            "inside the directory (readers never follow a name out of the directory they were given)"
        )
    return real


def require_regular(path: Path) -> Path:
    """``path`` when it is a regular file (symlinks followed); refused naming what it is otherwise."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise UnsafeFileError(f"{path}: does not exist (a dangling name); expected a regular file") from None
    if not stat.S_ISREG(mode):
        raise UnsafeFileError(f"{path}: {_kind(mode)}, not a regular file; refused without opening it")
    return path


def contained_file(root: Path, name: str) -> Path:
    """The resolved path of file ``name`` of directory ``root``: inside it and a regular file."""
    return require_regular(contained_path(root, name))


def open_regular(path: str | os.PathLike[str]) -> io.BufferedReader:
    """Open a regular file for binary reading without ever blocking on a FIFO (checked before and after)."""
    require_regular(Path(path))
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise UnsafeFileError(f"{path}: {_kind(mode)}, not a regular file; refused")
    return io.BufferedReader(io.FileIO(fd, "rb"))
