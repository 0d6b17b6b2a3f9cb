"""A SentencePiece-style tokenizer.json (BPE with byte_fallback, as Gemma's and Llama 2's) written as llama.cpp's
``llama`` vocabulary: scores from the merge order, token types, ``add_space_prefix`` from the normalizer.
(On the real Gemma 3 vocabulary: tests-integration/test_gguf_writer_vs_transformers.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from qformats.gguf_file import GGUFFileError
from qformats.gguf_file.spm_vocabulary import adds_space_prefix
from qformats.gguf_file.tokenizer_metadata import tokenizer_from_hf
from qformats.gguf_file.values import ValueType

VOCAB = {"<unk>": 0, "<0x00>": 1, "<0xFF>": 2, "a": 3, "b": 4, "c": 5, "\u2581": 6, "ab": 7, "bc": 8, "abc": 9,
         "\u2581a": 10}  # fmt: skip
MERGES = [["a", "b"], "\u2581 a", ["b", "c"], ["ab", "c"]]
ADDED = [{"id": 11, "content": "<bos>", "special": True}, {"id": 12, "content": "<eos>", "special": True},
         {"id": 13, "content": "<tool>", "special": False}]  # fmt: skip


def _directory(root: Path, normalizer: dict) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    tokenizer = {"added_tokens": ADDED, "normalizer": normalizer,
                 "model": {"type": "BPE", "byte_fallback": True, "unk_token": "<unk>", "vocab": VOCAB,
                           "merges": MERGES}}  # fmt: skip
    (root / "tokenizer.json").write_text(json.dumps(tokenizer), encoding="utf-8")
    config = {"bos_token": "<bos>", "eos_token": "<eos>", "add_bos_token": True}
    (root / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return root


def test_spm_vocabulary_scores_types_and_flags(tmp_path: Path) -> None:
    gemma = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
    meta = tokenizer_from_hf(_directory(tmp_path / "g", gemma), {"vocab_size": 16})
    value = {k: v.value for k, v in meta.items()}
    assert value["tokenizer.ggml.model"] == "llama"
    assert "tokenizer.ggml.merges" not in value and "tokenizer.ggml.pre" not in value
    tokens = value["tokenizer.ggml.tokens"]
    assert tokens[:4] == ["<unk>", "<0x00>", "<0xFF>", "a"] and tokens[11:] == [
        "<bos>",
        "<eos>",
        "<tool>",
        "[PAD14]",
        "[PAD15]",
    ]
    assert list(value["tokenizer.ggml.token_type"]) == [2, 6, 6, 1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 4, 5, 5]
    scores = np.asarray(value["tokenizer.ggml.scores"])
    assert meta["tokenizer.ggml.scores"].element_type == ValueType.FLOAT32 and scores.dtype == np.float32
    # ab (merge 0) before ▁a (1) before bc (2) before abc (3): llama.cpp joins the highest score first
    assert [scores[VOCAB[t]] for t in ("ab", "\u2581a", "bc", "abc")] == [0.0, -1.0, -2.0, -3.0]
    assert scores[VOCAB["a"]] == 0.0 and scores[11] == 0.0
    assert value["tokenizer.ggml.add_space_prefix"] is False and value["tokenizer.ggml.add_bos_token"] is True
    assert (value["tokenizer.ggml.bos_token_id"], value["tokenizer.ggml.eos_token_id"]) == (11, 12)

    llama2 = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"}, gemma]}
    assert adds_space_prefix({"normalizer": llama2}) and not adds_space_prefix({"normalizer": gemma})
    assert not adds_space_prefix({"normalizer": None})


def test_unreadable_merges_and_other_models_are_named(tmp_path: Path) -> None:
    root = _directory(tmp_path / "bad", {})
    data = json.loads((root / "tokenizer.json").read_text())
    data["model"]["merges"] = [["a"]]
    (root / "tokenizer.json").write_text(json.dumps(data))
    with pytest.raises(GGUFFileError, match=r"model.merges\[0\] is \['a'\]"):
        tokenizer_from_hf(root, {"vocab_size": 16})
    data["model"] = {"type": "Unigram", "vocab": [["a", 0.0]]}
    (root / "tokenizer.json").write_text(json.dumps(data))
    with pytest.raises(GGUFFileError, match=r"model.type 'Unigram': only a BPE tokenizer"):
        tokenizer_from_hf(root, {"vocab_size": 16})
