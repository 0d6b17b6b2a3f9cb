"""Writing the tokenizer and the source's side files into a save's staging directory, failures named.

A failed write (a full disk, a read-only location) is an ``OSError`` naming the *output* file (the
published name, not the hidden staging one, and never the source file being copied), which the CLI
reports in one line. The tokenizers library reports its own failed writes as a bare ``Exception``: that
becomes a :class:`~qhf.errors.TokenizerError` naming the output directory.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from qformats.checkpoint.durable_files import write_file_durable
from qformats.file_access import open_regular

from ..errors import TokenizerError


def save_tokenizer(tokenizer: Any, staging: Path, directory: Path) -> None:
    """``tokenizer.save_pretrained(staging)``, its failures naming ``directory`` (where it is published)."""
    try:
        tokenizer.save_pretrained(str(staging))
    except OSError as exc:
        name = Path(exc.filename).name if exc.filename else "tokenizer files"
        raise OSError(exc.errno, exc.strerror or str(exc), str(directory / name)) from None
    except Exception as exc:  # tokenizers raises a bare Exception for a failed write (e.g. a full disk)
        raise TokenizerError(
            f"{directory}: cannot write the tokenizer files ({exc}); expected a writable location with enough "
            "free space; nothing was published"
        ) from None


def copy_side_files(files: Mapping[str, Path], staging: Path, directory: Path) -> None:
    """Copy each ``name -> source path`` not already in ``staging``; a failed write names ``directory / name``."""
    for name, path in files.items():
        if (staging / name).exists():
            continue
        with open_regular(path) as handle:
            data = handle.read()
        try:
            write_file_durable(staging / name, data)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror or str(exc), str(directory / name)) from None
