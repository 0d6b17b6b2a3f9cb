"""The bundled default text (disjoint, deterministic slices) and tokenizer handling."""

from __future__ import annotations

import pytest
from qhf.corpus import bundled_docs, corpus_identity
from qhf.errors import CalibrationError, MissingFileError, TokenizerError
from qhf.tokenizer import ensure_padding, load_tokenizer, token_blocks
from tiny_models import build_tokenizer


def test_slices_are_disjoint_alternating_and_cover_everything() -> None:
    from pydoc_data.topics import topics

    cal, ev = bundled_docs("calibration"), bundled_docs("evaluation")
    assert not set(cal.names) & set(ev.names)
    assert sorted(cal.names + ev.names) == sorted(topics)
    keys = sorted(topics)
    assert cal.names == tuple(keys[0::2]) and ev.names == tuple(keys[1::2])
    assert cal.characters > 100_000 and ev.characters > 100_000
    assert bundled_docs("calibration") == cal  # deterministic


def test_unknown_split() -> None:
    with pytest.raises(ValueError, match="split"):
        bundled_docs("train")  # type: ignore[arg-type]


def test_identity_records_python_version_and_hash() -> None:
    ident = corpus_identity()
    assert ident["source"] == "pydoc_data.topics" and len(ident["sha256"]) == 64 and ident["python"].count(".") == 2


def test_token_blocks_have_exact_length_and_bos(tokenizer) -> None:
    blocks = token_blocks(tokenizer, bundled_docs("calibration").texts, count=5, length=64)
    assert len(blocks) == 5 and all(len(b) == 64 for b in blocks)
    assert all(b[0] == tokenizer.bos_token_id for b in blocks)
    # consecutive blocks continue the stream without overlap
    stream = [i for b in blocks for i in b[1:]]
    assert stream[:20] == tokenizer(bundled_docs("calibration").texts[0], add_special_tokens=False)["input_ids"][:20]
    assert token_blocks(tokenizer, bundled_docs("calibration").texts, count=5, length=64) == blocks


def test_token_blocks_too_little_text(tokenizer) -> None:
    with pytest.raises(CalibrationError, match="fewer than one block"):
        token_blocks(tokenizer, ["tiny"], count=2, length=64)
    assert len(token_blocks(tokenizer, [bundled_docs("calibration").texts[0]], count=10_000, length=64)) < 10_000


def test_padding_borrows_eos_and_says_so() -> None:
    tok = build_tokenizer()
    assert tok.pad_token is None
    note = ensure_padding(tok)
    assert note is not None and "eos_token" in note and tok.pad_token == "</s>"
    assert ensure_padding(tok) is None


def test_tokenizer_that_cannot_pad() -> None:
    tok = build_tokenizer(with_specials=False)
    with pytest.raises(TokenizerError, match="cannot pad"):
        ensure_padding(tok)


def test_load_tokenizer_missing_files(tmp_path) -> None:
    with pytest.raises(MissingFileError, match="no tokenizer files"):
        load_tokenizer(tmp_path)


def test_load_tokenizer_round_trip(tmp_path, tokenizer) -> None:
    tokenizer.save_pretrained(tmp_path)
    again = load_tokenizer(tmp_path)
    assert again("def f(): pass")["input_ids"] == tokenizer("def f(): pass")["input_ids"]


def test_broken_tokenizer_file(tmp_path) -> None:
    (tmp_path / "tokenizer.json").write_text("{broken")
    with pytest.raises((TokenizerError, MissingFileError)):
        load_tokenizer(tmp_path)
