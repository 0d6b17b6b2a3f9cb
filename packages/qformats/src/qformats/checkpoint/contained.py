"""Refusing files of a checkpoint directory that resolve outside it or are not regular files."""

from __future__ import annotations

from pathlib import Path

from ..file_access import contained_path, require_regular


def inside_directory(root: Path, name: str) -> Path:
    """``root / name``, after checking that it resolves inside ``root`` and is a regular file.

    A symlink to another file of the same directory is allowed; one whose target lies elsewhere
    (``../other/model.safetensors``, an absolute path) is refused, so a directory cannot make a reader
    open files its owner never put there; a FIFO or device is refused without being opened
    (:mod:`qformats.file_access`).
    """
    require_regular(contained_path(root, name))
    return root / name
