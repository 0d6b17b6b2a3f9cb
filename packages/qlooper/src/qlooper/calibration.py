"""Calibration preparation: raw rows in, padded token batches out.

Accepted rows (a list/tuple of them, or a 2-D tensor of token ids):

* token-id lists and 1-D (or ``[1, T]``) integer tensors;
* dicts with ``input_ids`` (and optionally ``attention_mask``; positions whose mask is 0 are removed);
* dicts with ``text``, and plain strings, through ``tokenizer(text) -> list[int]``;
* dicts with ``messages`` and rows that are lists of ``{"role", "content"}`` dicts, through
  ``chat_template(messages) -> str | list[int]`` (a string result goes through the tokenizer).

Processing order: normalize → trim rows longer than ``max_length`` (keeping the start, or the end
with ``padding_side="left"``) → drop rows with ``length <= min_length`` → optionally concatenate into
``concat_size`` blocks joined by ``separator`` (the last block padded, mask 0) → sort ``"desc"``,
``"asc"``, ``"shuffle"`` (seeded) or ``None`` → batch ``batch_size`` rows, padding with
``pad_token_id`` (mask 0) on ``padding_side``.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from .errors import CalibrationError

Tokenizer = Callable[[str], Sequence[int]]
ChatTemplate = Callable[[list[dict[str, str]]], "str | Sequence[int]"]
SORT_CHOICES = ("desc", "asc", "shuffle", None)


@dataclass(frozen=True)
class CalibrationBatch:
    """One batch: ``input_ids`` ``[B, T]`` int64 and ``attention_mask`` ``[B, T]`` int64 (1 = real token)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor

    @property
    def tokens(self) -> int:
        return int(self.attention_mask.sum())


@dataclass
class CalibrationSet:
    """Prepared calibration: batches plus an account of what was trimmed and dropped (row counts by reason)."""

    batches: list[CalibrationBatch]
    rows: int
    dropped: dict[str, int] = field(default_factory=dict)
    trimmed: int = 0

    @property
    def total_tokens(self) -> int:
        """Real (mask 1) tokens over every batch."""
        return sum(b.tokens for b in self.batches)

    def fingerprint(self) -> str:
        """sha256 over every batch's ids and mask (shape and bytes); identifies the data for resume."""
        digest = hashlib.sha256()
        for batch in self.batches:
            for tensor in (batch.input_ids, batch.attention_mask):
                digest.update(repr(tuple(tensor.shape)).encode())
                digest.update(tensor.to(torch.int64).contiguous().numpy().tobytes())
        return digest.hexdigest()


def _as_ids(value: object, where: str) -> list[int]:
    if isinstance(value, torch.Tensor):
        if value.dim() == 2 and value.shape[0] == 1:
            value = value[0]
        if value.dim() != 1:
            raise CalibrationError(
                f"{where}: expected a 1-D token tensor (or [1, T]), found shape {tuple(value.shape)}"
            )
        if value.dtype.is_floating_point or value.dtype == torch.bool:
            raise CalibrationError(f"{where}: expected integer token ids, found dtype {value.dtype}")
        return [int(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        if value and isinstance(value[0], (list, tuple)) and len(value) == 1:
            value = value[0]
        ids = []
        for v in value:
            if isinstance(v, bool) or not isinstance(v, int):
                raise CalibrationError(f"{where}: expected integer token ids, found {type(v).__name__} {v!r}")
            ids.append(v)
        return ids
    raise CalibrationError(f"{where}: expected token ids (list or tensor), found {type(value).__name__}")


def _tokenize(text: str, tokenizer: Tokenizer | None, where: str) -> list[int]:
    if tokenizer is None:
        raise CalibrationError(f"{where}: a text row needs a tokenizer callable; none was given")
    return _as_ids(list(tokenizer(text)), f"{where} (tokenizer output)")


def _messages(
    messages: object, tokenizer: Tokenizer | None, chat_template: ChatTemplate | None, where: str
) -> list[int]:
    if not isinstance(messages, list) or not all(isinstance(m, Mapping) for m in messages):
        raise CalibrationError(f"{where}: expected messages as a list of {{role, content}} dicts")
    if chat_template is None:
        raise CalibrationError(f"{where}: chat messages need a chat_template callable; none was given")
    rendered = chat_template([dict(m) for m in messages])
    if isinstance(rendered, str):
        return _tokenize(rendered, tokenizer, where)
    return _as_ids(rendered, f"{where} (chat_template output)")


def _normalize(row: object, index: int, tokenizer: Tokenizer | None, chat_template: ChatTemplate | None) -> list[int]:
    where = f"calibration row {index}"
    if isinstance(row, str):
        return _tokenize(row, tokenizer, where)
    if isinstance(row, Mapping):
        if "input_ids" in row:
            ids = _as_ids(row["input_ids"], f"{where} input_ids")
            if row.get("attention_mask") is None:
                return ids
            mask = _as_ids(row["attention_mask"], f"{where} attention_mask")
            if len(mask) != len(ids):
                raise CalibrationError(
                    f"{where}: attention_mask has {len(mask)} entries, expected {len(ids)} (one per input_id)"
                )
            if any(m not in (0, 1) for m in mask):
                raise CalibrationError(f"{where}: attention_mask must hold only 0 and 1")
            return [t for t, m in zip(ids, mask, strict=False) if m == 1]
        if "messages" in row:
            return _messages(row["messages"], tokenizer, chat_template, where)
        if "text" in row:
            if not isinstance(row["text"], str):
                raise CalibrationError(f"{where}: 'text' must be a string, found {type(row['text']).__name__}")
            return _tokenize(row["text"], tokenizer, where)
        raise CalibrationError(f"{where}: a dict row needs 'input_ids', 'text' or 'messages'; found keys {sorted(row)}")
    if isinstance(row, list) and row and all(isinstance(m, Mapping) for m in row):
        return _messages(row, tokenizer, chat_template, where)
    return _as_ids(row, where)


def _rows_of(data: object) -> list[object]:
    if isinstance(data, (str, bytes)):
        raise CalibrationError("calibration: a single string is not a dataset; pass a list of rows")
    if isinstance(data, torch.Tensor):
        if data.dim() != 2:
            raise CalibrationError(f"calibration: a tensor dataset must be [rows, T], found shape {tuple(data.shape)}")
        return list(data)
    if isinstance(data, Mapping):
        raise CalibrationError("calibration: a single dict is not a dataset; pass a list of rows")
    if not isinstance(data, Sequence):
        raise CalibrationError(f"calibration: expected a sized sequence of rows, found {type(data).__name__}")
    return list(data)


def _concat(rows: list[list[int]], size: int, separator: list[int]) -> list[tuple[list[int], int]]:
    stream: list[int] = []
    for i, row in enumerate(rows):
        if i:
            stream.extend(separator)
        stream.extend(row)
    blocks = []
    for start in range(0, len(stream), size):
        block = stream[start : start + size]
        blocks.append((block, len(block)))
    return blocks


def prepare_calibration(
    data: object,
    *,
    tokenizer: Tokenizer | None = None,
    chat_template: ChatTemplate | None = None,
    max_length: int | None = None,
    min_length: int = 10,
    concat_size: int | None = None,
    separator: str | Sequence[int] | None = None,
    sort: str | None = "desc",
    seed: int = 0,
    batch_size: int = 1,
    pad_token_id: int = 0,
    padding_side: str = "right",
) -> CalibrationSet:
    """Turn ``data`` into padded batches (see the module docstring for the accepted rows and the order)."""
    if sort not in SORT_CHOICES:
        raise CalibrationError(f"sort: expected one of {SORT_CHOICES}, found {sort!r}")
    if padding_side not in ("left", "right"):
        raise CalibrationError(f"padding_side: expected 'left' or 'right', found {padding_side!r}")
    if batch_size < 1:
        raise CalibrationError(f"batch_size: expected >= 1, found {batch_size}")
    if concat_size is not None and concat_size < 1:
        raise CalibrationError(f"concat_size: expected >= 1 or None, found {concat_size}")
    raw = _rows_of(data)
    if not raw:
        raise CalibrationError("calibration: the dataset is empty (0 rows)")
    rows: list[list[int]] = []
    dropped = {"empty": 0, f"length <= min_length={min_length}": 0}
    trimmed = 0
    for index, row in enumerate(raw):
        ids = _normalize(row, index, tokenizer, chat_template)
        if max_length is not None and len(ids) > max_length:
            ids = ids[-max_length:] if padding_side == "left" else ids[:max_length]
            trimmed += 1
        if not ids:
            dropped["empty"] += 1
        elif len(ids) <= min_length:
            dropped[f"length <= min_length={min_length}"] += 1
        else:
            rows.append(ids)
    dropped = {reason: n for reason, n in dropped.items() if n}
    if not rows:
        why = ", ".join(f"{n} {reason}" for reason, n in dropped.items())
        raise CalibrationError(f"calibration: no usable rows; all {len(raw)} rows were dropped ({why})")
    if concat_size is not None:
        sep = _tokenize(separator, tokenizer, "separator") if isinstance(separator, str) else list(separator or [])
        blocks = _concat(rows, concat_size, sep)
    else:
        blocks = [(r, len(r)) for r in rows]
    if sort == "desc":
        blocks.sort(key=lambda b: -b[1])
    elif sort == "asc":
        blocks.sort(key=lambda b: b[1])
    elif sort == "shuffle":
        random.Random(seed).shuffle(blocks)
    batches = []
    for start in range(0, len(blocks), batch_size):
        chunk = blocks[start : start + batch_size]
        width = concat_size if concat_size is not None else max(n for _, n in chunk)
        batch_ids = torch.full((len(chunk), width), pad_token_id, dtype=torch.int64)
        mask = torch.zeros((len(chunk), width), dtype=torch.int64)
        for i, (tokens, n) in enumerate(chunk):
            span = slice(width - n, width) if padding_side == "left" else slice(0, n)
            batch_ids[i, span] = torch.tensor(tokens, dtype=torch.int64)
            mask[i, span] = 1
        batches.append(CalibrationBatch(batch_ids, mask))
    return CalibrationSet(batches=batches, rows=len(raw), dropped=dropped, trimmed=trimmed)
