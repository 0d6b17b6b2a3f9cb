"""Clean, named errors of issue 36 item 9: flags checked before the model loads, a full disk while saving the
tokenizer or a side file naming the output file, a quantized checkpoint given as the source, and a deeply
nested or non-UTF-8 ``quantize_config.json`` in ``eval``."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest
from conftest import one_line_failure, run_lowbit


def _no_model_load(monkeypatch) -> None:
    """Make loading a model fail loudly: a flag error must come first."""
    import qhf

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the flags were checked")

    monkeypatch.setattr(qhf, "load", refuse)


def test_a_bad_max_shard_size_fails_before_the_model_loads(tiny_llama: Path, tmp_path: Path, monkeypatch) -> None:
    _no_model_load(monkeypatch)
    result = run_lowbit("quantize", str(tiny_llama), "--out", str(tmp_path / "o"), "--max-shard-size", "lots")
    one_line_failure(result, "--max-shard-size", "'lots'")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("fmt", ["gptq", "gptq_v2"])
def test_an_explicit_gptq_format_with_5_bits_is_refused(tiny_llama: Path, tmp_path: Path, monkeypatch, fmt) -> None:
    _no_model_load(monkeypatch)
    result = run_lowbit("quantize", str(tiny_llama), "--out", str(tmp_path / "o"), "--format", fmt, "--bits", "5")
    one_line_failure(result, f"--format {fmt} --bits 5", "--format gptq_p")


def test_quantizing_a_quantized_checkpoint_names_what_it_is(quantized: Path, tmp_path: Path) -> None:
    result = run_lowbit("quantize", str(quantized), "--out", str(tmp_path / "o"), "--method", "rtn")
    one_line_failure(result, "already a quantized checkpoint (gptq 4-bit", "quantize_config.json")


def _full(exc_type):
    def fail(*args, **kwargs):
        raise exc_type

    return fail


def test_a_full_disk_while_saving_the_tokenizer_names_the_output(tiny_llama: Path, tmp_path: Path, monkeypatch) -> None:
    from transformers import PreTrainedTokenizerBase

    monkeypatch.setattr(PreTrainedTokenizerBase, "save_pretrained", _full(Exception("No space left on device")))
    out = tmp_path / "out"
    flags = ("--method", "rtn", "--group-size", "32", "--quiet")
    result = run_lowbit("quantize", str(tiny_llama), "--out", str(out), *flags)
    one_line_failure(result, f"{out}: cannot write the tokenizer files", "No space left on device")
    assert not out.exists()


def test_a_full_disk_while_copying_a_side_file_names_the_output_file(
    tiny_llama: Path, tmp_path: Path, monkeypatch
) -> None:
    import qhf.save.side_files as side

    source = tmp_path / "src"
    shutil.copytree(tiny_llama, source)
    (source / "generation_config.json").write_text('{"bos_token_id": 1}')
    real = side.write_file_durable

    def full(path: Path, data: bytes) -> None:
        if path.name == "generation_config.json":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, data)

    monkeypatch.setattr(side, "write_file_durable", full)
    out = tmp_path / "out"
    flags = ("--method", "rtn", "--group-size", "32", "--quiet")
    result = run_lowbit("quantize", str(source), "--out", str(out), *flags)
    one_line_failure(result, f"{out / 'generation_config.json'}: No space left on device")
    assert str(source) not in result.stderr and not out.exists()


@pytest.mark.parametrize(("content", "expected"), [(b"[" * 100000 + b"]" * 100000, "nested too deeply"),
                                                   (b'{"bits": "\xff"}', "not UTF-8")])  # fmt: skip
def test_eval_names_a_bad_quantize_config(quantized: Path, tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "c"
    shutil.copytree(quantized, path)
    (path / "quantize_config.json").write_bytes(content)
    result = run_lowbit("eval", str(path), "--max-windows", "1", "--max-new-tokens", "0")
    one_line_failure(result, "quantize_config.json", expected)
