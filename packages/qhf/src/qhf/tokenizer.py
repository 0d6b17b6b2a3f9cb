"""Tokenizer handling: loading from a source, padding policy, encoding text into token ids.

Padding: a tokenizer without a pad token borrows its EOS (or UNK) token for padding; this changes no
result because padded positions are masked out, and the choice is logged and returned so the run can
record it. A tokenizer with none of the three cannot pad a batch: :class:`TokenizerError`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from qformats.errors import UnsafeFileError
from qformats.file_access import contained_file

from .errors import CalibrationError, MissingFileError, TokenizerError
from .source.remote_code import TRUST_REMOTE_CODE, refuse_remote_code

log = logging.getLogger(__name__)

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template.jinja",
)


def load_tokenizer(path: str | Path) -> Any:
    """The tokenizer saved in directory ``path`` (local files only)."""
    from transformers import AutoTokenizer

    path = Path(path)
    present = [name for name in TOKENIZER_FILES if os.path.lexists(path / name)]
    if not present:
        raise MissingFileError(
            f"{path}: no tokenizer files (expected one of {', '.join(TOKENIZER_FILES[:4])}); pass tokenizer= explicitly"
        )
    for name in present:  # transformers would follow a symlink out of the directory, or block on a FIFO
        try:
            contained_file(path, name)
        except UnsafeFileError as exc:
            raise TokenizerError(str(exc)) from None
    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True, trust_remote_code=TRUST_REMOTE_CODE)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        refusal = refuse_remote_code(path, exc)
        if refusal is not None:
            raise refusal from None
        raise TokenizerError(f"{path}: transformers cannot load the tokenizer: {exc}") from exc


def load_gguf_tokenizer(path: str | Path) -> Any:
    """The tokenizer embedded in a .gguf file (transformers converts it; needs the ``gguf`` package)."""
    from transformers import AutoTokenizer

    path = Path(path)
    try:
        return AutoTokenizer.from_pretrained(
            str(path.parent), gguf_file=path.name, local_files_only=True, trust_remote_code=TRUST_REMOTE_CODE
        )
    except ImportError as exc:
        raise TokenizerError(
            f"{path}: reading the tokenizer embedded in a .gguf file needs the 'gguf' package "
            f"(pip install 'qhf[gguf]'), or pass tokenizer= explicitly: {exc}"
        ) from exc
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TokenizerError(f"{path}: transformers cannot build the tokenizer embedded in this file: {exc}") from exc


def ensure_padding(tokenizer: Any) -> str | None:
    """Give ``tokenizer`` a pad token if it lacks one; returns a note of what was done (None if nothing).

    Raises :class:`TokenizerError` when it has no pad, EOS or UNK token to pad with.
    """
    if getattr(tokenizer, "pad_token_id", None) is not None:
        return None
    for attr in ("eos_token", "unk_token"):
        token = getattr(tokenizer, attr, None)
        if token is not None:
            tokenizer.pad_token = token
            note = f"tokenizer has no pad token; padding with its {attr} {token!r} (padded positions are masked)"
            log.info(note)
            return note
    raise TokenizerError(
        f"tokenizer {type(tokenizer).__name__} cannot pad: it has no pad_token, eos_token or unk_token; "
        "set tokenizer.pad_token before quantizing with batches"
    )


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text`` without special tokens (a BOS/EOS is the caller's decision)."""
    try:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    except (TypeError, ValueError, KeyError) as exc:
        raise TokenizerError(f"tokenizer {type(tokenizer).__name__} cannot encode text: {exc}") from exc
    return [int(i) for i in ids]


#: Text whose default encoding shows whether a tokenizer prepends BOS (any short word; its ids are not used).
_BOS_PROBE = "The"


def default_bos(tokenizer: Any) -> int | None:
    """The BOS id when ``tokenizer``'s own default encoding (``add_special_tokens=True``) starts text with its
    BOS token, else None. That is what ``add_bos_token`` (a .gguf's ``tokenizer.ggml.add_bos_token``, a
    ``tokenizer_config.json`` field) or a post-processor template decide: Gemma 3's tokenizer prepends ``<bos>``,
    SmolLM2's prepends nothing. Decided by encoding a probe word both ways, so no attribute name is assumed."""
    bos_id = getattr(tokenizer, "bos_token_id", None)
    if bos_id is None:
        return None
    try:
        with_specials = [int(i) for i in tokenizer(_BOS_PROBE)["input_ids"]]
    except (TypeError, ValueError, KeyError) as exc:
        raise TokenizerError(f"tokenizer {type(tokenizer).__name__} cannot encode text: {exc}") from exc
    plain = encode(tokenizer, _BOS_PROBE)
    return int(bos_id) if with_specials[:1] == [int(bos_id)] and with_specials[1 : 1 + len(plain)] == plain else None


def token_blocks(tokenizer: Any, texts: Sequence[str], *, count: int, length: int, bos: bool = True) -> list[list[int]]:
    """``count`` blocks of ``length`` token ids cut from the concatenated ``texts`` (EOS between texts).

    Each block starts with BOS when ``bos`` and the tokenizer has one. Fewer blocks are returned (with a
    warning) when the text is too short; none at all is a :class:`CalibrationError`.
    """
    if count < 1 or length < 2:
        raise CalibrationError(f"calibration: expected count >= 1 and length >= 2, found {count=}, {length=}")
    bos_id = getattr(tokenizer, "bos_token_id", None) if bos else None
    eos_id = getattr(tokenizer, "eos_token_id", None)
    body = length - (1 if bos_id is not None else 0)
    stream: list[int] = []
    for text in texts:
        stream.extend(encode(tokenizer, text))
        if eos_id is not None:
            stream.append(int(eos_id))
        if len(stream) >= count * body:
            break
    blocks: list[list[int]] = []
    for start in range(0, len(stream) - body + 1, body):
        if len(blocks) == count:
            break
        chunk = stream[start : start + body]
        blocks.append(([int(bos_id)] if bos_id is not None else []) + chunk)
    if not blocks:
        raise CalibrationError(
            f"calibration: the text gives {len(stream)} tokens, fewer than one block of {length}; "
            "give more text or a shorter length"
        )
    if len(blocks) < count:
        log.warning("calibration: asked for %d blocks of %d tokens, the text gives %d", count, length, len(blocks))
    return blocks
