"""The ``tokenizer.ggml.*`` / ``tokenizer.chat_template`` keys of a .gguf, from a .gguf or an HF directory.

* From a .gguf (:func:`tokenizer_from_gguf`): every ``tokenizer.*`` key is carried across with its GGUF
  type unchanged (tokens, scores, token types, merges, special ids, add_bos/eos, chat template, pre).
* From a Hugging Face directory (:func:`tokenizer_from_hf`): ``tokenizer.json`` must be a BPE. With
  ``byte_fallback`` (SentencePiece style: Gemma, Llama 2) it is written as llama.cpp's ``llama`` vocabulary:
  tokens, scores and token types of :mod:`.spm_vocabulary`, ``add_space_prefix`` from the normalizer, no merges
  and no ``pre``. Without it (a byte-level, gpt2 style BPE) as the ``gpt2`` vocabulary: tokens are listed by
  id up to the model's ``vocab_size`` (ids the tokenizer lacks become ``[PAD<id>]``, type UNUSED, as llama.cpp's
  converter does); token types: 1 normal, 3 control (special added tokens), 4 user-defined (other added
  tokens), 5 unused. Merges are written as ``"a b"`` strings; no scores (llama.cpp's gpt2 vocabulary
  does not read them). Special ids come from ``tokenizer_config.json`` (token strings) or else
  ``config.json``; ``tokenizer.ggml.pre`` is ``"default"`` (llama.cpp's gpt2 pre-tokenizer regex).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .errors import GGUFFileError
from .reader import GGUFReader
from .spm_vocabulary import adds_space_prefix, spm_vocabulary
from .values import GGUFValue, ValueType

NORMAL, CONTROL, USER_DEFINED, UNUSED = 1, 3, 4, 5
_SPECIAL = (("bos", "bos_token_id"), ("eos", "eos_token_id"), ("unk", "unknown_token_id"),
            ("pad", "padding_token_id"))  # fmt: skip


def tokenizer_from_gguf(reader: GGUFReader) -> dict[str, GGUFValue]:
    """Every ``tokenizer.*`` key of a .gguf, types kept; refuses a file without ``tokenizer.ggml.tokens``."""
    keys = {key: value for key, value in reader.metadata.items() if key.startswith("tokenizer.")}
    if "tokenizer.ggml.tokens" not in keys:
        raise GGUFFileError(f"{reader.path}: no tokenizer.ggml.tokens; the source .gguf carries no tokenizer")
    return keys


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise GGUFFileError(f"{path}: unreadable JSON ({exc})") from None


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _tokens(
    model: Mapping[str, Any], added: list[Mapping[str, Any]], vocab_size: int, path: Path
) -> tuple[list[str], list[int]]:
    by_id: dict[int, tuple[str, int]] = {int(i): (str(t), NORMAL) for t, i in model["vocab"].items()}
    for entry in added:
        by_id[int(entry["id"])] = (str(entry["content"]), CONTROL if entry.get("special") else USER_DEFINED)
    if by_id and max(by_id) >= vocab_size:
        raise GGUFFileError(f"{path}: token id {max(by_id)} is outside the model's vocab_size {vocab_size}")
    tokens = [by_id.get(i, (f"[PAD{i}]", UNUSED)) for i in range(vocab_size)]
    return [t for t, _ in tokens], [k for _, k in tokens]


def _merges(raw: list[Any], path: Path) -> list[str]:
    merges = []
    for i, merge in enumerate(raw):
        if isinstance(merge, str):
            merges.append(merge)
        elif isinstance(merge, list) and len(merge) == 2 and all(isinstance(p, str) for p in merge):
            merges.append(f"{merge[0]} {merge[1]}")
        else:
            raise GGUFFileError(f"{path}: model.merges[{i}] is {merge!r}; expected 'a b' or ['a', 'b']")
    return merges


def _add_bos(tok_json: Mapping[str, Any], tok_config: Mapping[str, Any]) -> bool:
    if isinstance(tok_config.get("add_bos_token"), bool):
        return bool(tok_config["add_bos_token"])
    post = tok_json.get("post_processor") or {}
    single = post.get("single") if post.get("type") == "TemplateProcessing" else None
    return isinstance(single, list) and bool(single) and "SpecialToken" in single[0]


def tokenizer_from_hf(directory: str | Path, config: Mapping[str, Any]) -> dict[str, GGUFValue]:
    """``tokenizer.*`` keys built from ``directory/tokenizer.json`` (+ ``tokenizer_config.json``)."""
    root = Path(directory)
    path = root / "tokenizer.json"
    if not path.is_file():
        raise GGUFFileError(f"{root}: no tokenizer.json; a .gguf needs the tokenizer (a BPE tokenizer.json)")
    tok = _read_json(path)
    model = tok.get("model") or {}
    if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise GGUFFileError(
            f"{path}: model.type {model.get('type')!r}: only a BPE tokenizer (byte-level gpt2 style, or "
            "SentencePiece style with byte_fallback) can be written to a .gguf"
        )
    tok_config_path = root / "tokenizer_config.json"
    tok_config = _read_json(tok_config_path) if tok_config_path.is_file() else {}
    added = list(tok.get("added_tokens") or [])
    if model.get("byte_fallback"):
        tokens, scores, kinds = spm_vocabulary(model, added, int(config["vocab_size"]), path)
        meta: dict[str, GGUFValue] = {
            "tokenizer.ggml.model": GGUFValue(ValueType.STRING, "llama"),
            "tokenizer.ggml.tokens": GGUFValue(ValueType.ARRAY, tokens, ValueType.STRING),
            "tokenizer.ggml.scores": GGUFValue(ValueType.ARRAY, scores, ValueType.FLOAT32),
            "tokenizer.ggml.token_type": GGUFValue(ValueType.ARRAY, kinds, ValueType.INT32),
            "tokenizer.ggml.add_space_prefix": GGUFValue(ValueType.BOOL, adds_space_prefix(tok)),
        }
    else:
        tokens, types = _tokens(model, added, int(config["vocab_size"]), path)
        merges = _merges(model.get("merges") or [], path)
        meta = {
            "tokenizer.ggml.model": GGUFValue(ValueType.STRING, "gpt2"),
            "tokenizer.ggml.pre": GGUFValue(ValueType.STRING, "default"),
            "tokenizer.ggml.tokens": GGUFValue(ValueType.ARRAY, tokens, ValueType.STRING),
            "tokenizer.ggml.token_type": GGUFValue(ValueType.ARRAY, np.asarray(types, "<i4"), ValueType.INT32),
            "tokenizer.ggml.merges": GGUFValue(ValueType.ARRAY, merges, ValueType.STRING),
        }
    index = {t: i for i, t in enumerate(tokens)}
    for short, key in _SPECIAL:
        text = _token_text(tok_config.get(f"{short}_token"))
        ident = index.get(text) if text is not None else config.get(f"{short}_token_id")
        if isinstance(ident, int):
            meta[f"tokenizer.ggml.{key}"] = GGUFValue(ValueType.UINT32, ident)
    meta["tokenizer.ggml.add_bos_token"] = GGUFValue(ValueType.BOOL, _add_bos(tok, tok_config))
    meta["tokenizer.ggml.add_eos_token"] = GGUFValue(ValueType.BOOL, bool(tok_config.get("add_eos_token", False)))
    template = tok_config.get("chat_template")
    jinja = root / "chat_template.jinja"
    if not isinstance(template, str) and jinja.is_file():
        template = jinja.read_text(encoding="utf-8")
    if isinstance(template, str):
        meta["tokenizer.chat_template"] = GGUFValue(ValueType.STRING, template)
    return meta
