"""Reading a JSON file of a model or checkpoint directory: resolved, contained, regular, named errors.

:func:`read_json_file` opens ``directory / name`` only after qformats' checks (:mod:`qformats.file_access`:
the name resolves inside the directory, or its hub-cache ``blobs``, and is a regular file, so a FIFO is
never opened) and turns every way the file can be bad into a :class:`~qhf.errors.SourceFormatError` naming
it and what was expected: not UTF-8, invalid JSON, nested too deeply, outside the directory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from qformats.errors import UnsafeFileError
from qformats.file_access import contained_file, open_regular

from ..errors import SourceFormatError


def checked_file(directory: Path, name: str) -> Path:
    """The resolved path of ``directory / name`` after the containment and regular-file checks."""
    try:
        return contained_file(directory, name)
    except UnsafeFileError as exc:
        raise SourceFormatError(str(exc)) from None


def read_json_file(directory: Path, name: str) -> Any:
    """The parsed JSON of ``directory / name`` (raises :class:`SourceFormatError` naming the file)."""
    path = directory / name
    real = checked_file(directory, name)
    try:
        with open_regular(real) as handle:
            text = handle.read().decode("utf-8")
        return json.loads(text)
    except UnsafeFileError as exc:
        raise SourceFormatError(str(exc)) from None
    except OSError as exc:
        raise SourceFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise SourceFormatError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start}); expected UTF-8 JSON") from None
    except json.JSONDecodeError as exc:
        raise SourceFormatError(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise SourceFormatError(f"{path}: JSON nested too deeply to parse; expected a flat config object") from None
