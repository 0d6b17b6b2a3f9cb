"""Turning ``--calibration FILE|builtin`` into what ``qhf.QuantModel.quantize(calibration=...)`` accepts.

* ``builtin`` -> ``None``: qhf's documented default calibration source (it says which in the run summary).
* a ``.jsonl`` file -> rows: each line is a JSON string, a list of token ids, or an object with ``text`` or
  ``input_ids``; at most ``samples`` rows are used.
* any other file -> UTF-8 text cut into ``samples`` blocks of ``length`` tokens with qhf's tokenizer
  (``qhf.tokenizer.token_blocks``, the same cutting qhf applies to its default text).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import UsageError

BUILTIN = "builtin"


def _jsonl_rows(path: Path, samples: int) -> list[Any]:
    rows: list[Any] = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UsageError(f"--calibration {path}: line {number} is not JSON: {exc.msg}") from None
            if isinstance(value, dict) and ("text" in value or "input_ids" in value):
                rows.append(value["text"] if "text" in value else value["input_ids"])
            elif isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, int) for v in value)):
                rows.append(value)
            else:
                raise UsageError(
                    f"--calibration {path}: line {number}: expected a string, a list of token ids or an object "
                    f"with 'text' or 'input_ids', found {type(value).__name__}"
                )
            if len(rows) == samples:
                break
    if not rows:
        raise UsageError(f"--calibration {path}: no rows (expected one JSON value per line)")
    return rows


def calibration_rows(spec: str, tokenizer: Any, *, samples: int, length: int) -> tuple[Any, str]:
    """``(calibration, description)`` for ``--calibration spec``; ``calibration`` None means qhf's default."""
    if spec == BUILTIN:
        return None, "qhf's default calibration source"
    path = Path(spec)
    if not path.is_file():
        raise UsageError(f"--calibration: expected 'builtin' or an existing text/.jsonl file, found {spec!r}")
    if path.suffix == ".jsonl":
        rows = _jsonl_rows(path, samples)
        return rows, f"{path} ({len(rows)} rows)"
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"--calibration {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if tokenizer is None:
        raise UsageError(f"--calibration {path}: cutting text into blocks needs the model's tokenizer; none was found")
    from qhf.tokenizer import token_blocks

    blocks = token_blocks(tokenizer, [text], count=samples, length=length)
    return blocks, f"{path} ({len(blocks)} blocks of {length} tokens)"
