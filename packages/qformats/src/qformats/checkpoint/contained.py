"""Refusing files of a checkpoint directory that resolve outside it (symlinks leaving the directory)."""

from __future__ import annotations

from pathlib import Path

from ..errors import CheckpointFormatError


def inside_directory(root: Path, name: str) -> Path:
    """``root / name``, after checking that it resolves inside ``root`` (raises naming the file).

    A symlink to another file of the same directory is allowed; one whose target lies elsewhere
    (``../other/model.safetensors``, an absolute path) is refused, so a directory cannot make a reader
    open files its owner never put there.
    """
    path = root / name
    real_root = root.resolve()
    real = path.resolve()
    if real != real_root and real_root not in real.parents:
        raise CheckpointFormatError(
            f"{path}: a symlink to {real}, outside the checkpoint directory {real_root}; "
            "expected the file inside the directory"
        )
    return path
