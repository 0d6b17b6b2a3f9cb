"""No code from a model directory ever runs: ``trust_remote_code=False`` and a clear refusal.

Every transformers call of qhf passes ``trust_remote_code=False`` (left unset, transformers asks on the
terminal whether to run the directory's Python). When transformers then refuses a directory because its
architecture exists only as code in the directory, :func:`refuse_remote_code` turns the error into a
:class:`RemoteCodeRefusedError` naming the file and the ``auto_map`` entry. A directory with an
``auto_map`` whose ``model_type`` transformers knows loads with transformers' own classes (no code runs).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import SourceFormatError

TRUST_REMOTE_CODE = False
AUTO_MAP_FILES = ("config.json", "tokenizer_config.json")


class RemoteCodeRefusedError(SourceFormatError):
    """A model directory needs its own Python code (``auto_map``), which qhf never runs."""


def auto_map_entries(directory: Path) -> list[str]:
    """``"<file>: auto_map.<Auto class> -> <module.Class>"`` for every entry of the directory's configs."""
    found: list[str] = []
    for name in AUTO_MAP_FILES:
        try:
            data = json.loads((directory / name).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            continue
        auto_map = data.get("auto_map") if isinstance(data, dict) else None
        if isinstance(auto_map, dict):
            found.extend(f"{directory / name}: auto_map.{key} -> {value!r}" for key, value in auto_map.items())
    return found


def refuse_remote_code(directory: Path, error: Exception) -> RemoteCodeRefusedError | None:
    """The refusal for ``error`` from transformers when ``directory`` declares remote code, else ``None``."""
    entries = auto_map_entries(directory)
    if not entries or ("trust_remote_code" not in str(error) and "custom code" not in str(error)):
        return None
    return RemoteCodeRefusedError(
        f"{entries[0]}: this model's architecture is Python code inside the model directory, which lowbit never "
        "runs (trust_remote_code=False); expected a model_type that transformers ships"
    )
