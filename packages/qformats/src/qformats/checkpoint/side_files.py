"""Copying a source directory's side files (tokenizer, generation config) into a staging directory.

A converted or exported checkpoint is only complete with its tokenizer: the side files are written into
the staging directory before it is published (:mod:`.publish`), so a crash leaves either the old target
or the complete new one, never a published checkpoint without its tokenizer. Each source file is resolved
and checked first (:mod:`qformats.file_access`: inside the source directory, a regular file), and a
failed write (a full disk) is an error naming the *output* file.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ..errors import CheckpointFormatError
from ..file_access import contained_file, open_regular
from .durable_files import write_file_durable


def copy_side_files(source: Path, names: Iterable[str], staging: Path, target: Path) -> list[str]:
    """Copy every file of ``names`` present in ``source`` into ``staging``; returns the names copied.

    ``target`` (the directory ``staging`` will be published as) names the output file in errors.
    """
    copied = []
    for name in names:
        if not os.path.lexists(source / name) or os.path.lexists(staging / name):
            continue
        with open_regular(contained_file(source, name)) as handle:
            data = handle.read()
        try:
            write_file_durable(staging / name, data)
        except OSError as exc:
            raise CheckpointFormatError(
                f"{target / name}: cannot write the output file ({exc.strerror or exc}); nothing was published"
            ) from None
        copied.append(name)
    return copied
