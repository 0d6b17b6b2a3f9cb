"""A SentencePiece-style Hugging Face ``tokenizer.json`` (BPE with ``byte_fallback``: Gemma, Llama 2, Mistral)
as llama.cpp's ``llama`` vocabulary: tokens, scores and token types.

llama.cpp's SentencePiece tokenizer starts from the text's characters and repeatedly joins the adjacent pair
whose joined text is a token with the highest score; Hugging Face's BPE joins the pair earliest in ``merges``.
The same order follows from scoring each token ``-r``, ``r`` the position of the first merge that makes it
(tokens no merge makes, such as single characters, score 0: llama.cpp never looks their score up). Hugging
Face's conversion of a SentencePiece model lists merges by the score of the token they make, so this is the
model's own order. Token types (llama.cpp's): 1 normal, 2 unknown (``model.unk_token``), 3 control (special
added tokens), 4 user-defined (other added tokens), 5 unused (ids the tokenizer lacks, named ``[PAD<id>]``), 6
byte (``<0x00>`` ... ``<0xFF>``, the byte fallback).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .errors import GGUFFileError

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
_BYTE = re.compile(r"^<0x[0-9A-Fa-f]{2}>$")


def _merge_pair(merge: Any, index: int, path: Path) -> str:
    if isinstance(merge, str) and " " in merge:
        left, right = merge.split(" ", 1)
        return left + right
    if isinstance(merge, list) and len(merge) == 2 and all(isinstance(p, str) for p in merge):
        return str(merge[0]) + str(merge[1])
    raise GGUFFileError(f"{path}: model.merges[{index}] is {merge!r}; expected 'a b' or ['a', 'b']")


def spm_vocabulary(
    model: Mapping[str, Any], added: list[Mapping[str, Any]], vocab_size: int, path: Path
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(tokens by id, float32 scores, int32 token types), ``vocab_size`` long (see the module docstring)."""
    made: dict[str, int] = {}
    for rank, merge in enumerate(model.get("merges") or []):
        made.setdefault(_merge_pair(merge, rank, path), rank)
    unknown = model.get("unk_token")
    by_id: dict[int, tuple[str, int]] = {}
    for token, ident in model["vocab"].items():
        kind = UNKNOWN if token == unknown else BYTE if _BYTE.match(token) else NORMAL
        by_id[int(ident)] = (str(token), kind)
    for entry in added:
        by_id[int(entry["id"])] = (str(entry["content"]), CONTROL if entry.get("special") else USER_DEFINED)
    if by_id and max(by_id) >= vocab_size:
        raise GGUFFileError(f"{path}: token id {max(by_id)} is outside the model's vocab_size {vocab_size}")
    tokens = [by_id.get(i, (f"[PAD{i}]", UNUSED)) for i in range(vocab_size)]
    scores = np.asarray([-float(made[t]) if t in made and k == NORMAL else 0.0 for t, k in tokens], "<f4")
    return [t for t, _ in tokens], scores, np.asarray([k for _, k in tokens], "<i4")


def adds_space_prefix(tokenizer_json: Mapping[str, Any]) -> bool:
    """Whether the normalizer prepends ``▁`` to the text (Llama 2 does; Gemma does not)."""
    normalizer = tokenizer_json.get("normalizer") or {}
    steps = normalizer.get("normalizers", [normalizer]) if normalizer.get("type") == "Sequence" else [normalizer]
    return any(step.get("type") == "Prepend" and step.get("prepend") == "\u2581" for step in steps)
