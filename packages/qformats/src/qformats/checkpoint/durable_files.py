"""Durable file primitives for checkpoint directories: umask-respecting creation, fsync, directory fsync.

Files are created with ``os.open(..., 0o666)`` so the process umask decides their mode (``tempfile``
would make them 0600, unreadable by a serving process under another user); directories with ``0o777``.
Every write is flushed and fsynced before the caller renames it, and directories are fsynced after
their entries change. An ``OSError`` from fsync is never swallowed.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from .fault_points import reach

FILE_MODE = 0o666
DIR_MODE = 0o777


def fsync_dir(path: Path) -> None:
    """fsync directory ``path`` so that renames and creations inside it are durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    reach("fsync_dir")


def temp_path(final: Path) -> Path:
    """A fresh hidden temporary name next to ``final``: ``.<name>.<uuid32>.tmp``."""
    return final.with_name(f".{final.name}.{uuid.uuid4().hex}.tmp")


def open_new(path: Path) -> int:
    """Create ``path`` for writing (fails if it exists); mode 0o666 minus the umask."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), FILE_MODE)


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write every byte of ``data`` (``os.write`` may write less than asked)."""
    view = memoryview(data).cast("B")
    while view.nbytes:
        written = os.write(fd, view)
        view = view[written:]


def write_file_durable(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary, fsync it, rename it into place."""
    tmp = temp_path(path)
    fd = open_new(tmp)
    try:
        write_all(fd, data)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    reach("file.fsynced")
    os.replace(tmp, path)
    reach("file.renamed")
