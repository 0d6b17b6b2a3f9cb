"""Durable file primitives: fsync of files and directories, temporaries, and atomic small-file replacement.

Every write goes to a temporary created with ``O_EXCL``, is flushed and fsynced, then renamed over its final
name with :func:`os.replace`, and the directory is fsynced. An ``OSError`` from fsync is never swallowed: the
store does not silently promise durability a filesystem cannot give.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from .faults import FaultHook

TEMP_SUFFIX = ".tmp"


def fsync_dir(path: Path) -> None:
    """fsync a directory so that renames and creations inside it are durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_dir(path: Path) -> None:
    """Create ``path`` and missing parents, fsyncing each parent whose entries changed."""
    missing: list[Path] = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except FileExistsError:
            pass
        fsync_dir(directory.parent)
    if not path.is_dir():
        raise NotADirectoryError(f"{path}: expected a directory")


def temp_name(final_name: str | None = None) -> str:
    """``.<final>.<uuid32>.tmp`` for a named file, ``.<uuid32>.tmp`` for an object."""
    token = uuid.uuid4().hex
    return f".{final_name}.{token}{TEMP_SUFFIX}" if final_name else f".{token}{TEMP_SUFFIX}"


def is_temp_name(name: str) -> bool:
    """True for names :func:`temp_name` produces (stray temporaries that collection may delete)."""
    if not (name.startswith(".") and name.endswith(TEMP_SUFFIX)):
        return False
    token = name[: -len(TEMP_SUFFIX)].rsplit(".", 1)[-1]
    return len(token) == 32 and all(c in "0123456789abcdef" for c in token)


def create_exclusive(path: Path) -> int:
    """Open a new file for writing; fails if it exists."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write every byte of ``data`` (``os.write`` may write less than asked)."""
    view = memoryview(data).cast("B")
    while view.nbytes:
        written = os.write(fd, view)
        view = view[written:]


def atomic_replace_file(directory: Path, name: str, data: bytes, faults: FaultHook, prefix: str | None = None) -> None:
    """Atomically replace ``directory/name`` with ``data``; fault points are ``<prefix>.*`` when given."""
    tmp = directory / temp_name(name)
    fd = create_exclusive(tmp)
    try:
        if prefix:
            faults.reach(f"{prefix}.temp_created")
        half = len(data) // 2
        write_all(fd, data[:half])
        if prefix:
            faults.reach(f"{prefix}.mid_write")
        write_all(fd, data[half:])
        if prefix:
            faults.reach(f"{prefix}.before_fsync")
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    if prefix:
        faults.reach(f"{prefix}.after_fsync")
    os.replace(tmp, directory / name)
    if prefix:
        faults.reach(f"{prefix}.after_replace")
    fsync_dir(directory)
    if prefix:
        faults.reach(f"{prefix}.after_dirsync")
