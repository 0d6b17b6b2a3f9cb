"""Every name a qhf reader opens is resolved, contained and a regular file (issue 36, items 5, 6 and 9).

A shard that is (or links to) a FIFO is refused without being opened (opening a FIFO blocks forever; an
alarm of minutes guards each test against such a hang); ``tokenizer.json`` / ``config.json`` symlinked out of
the directory are refused by name; a non-UTF-8 or deeply nested ``quantize_config.json`` is a named error.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import qhf
from qhf.errors import SourceFormatError, TokenizerError
from sym_checkpoint import sym_tensors, write_sym

HANG_GUARD_S = 240


@pytest.fixture(autouse=True)
def hang_guard() -> Iterator[None]:
    """Fail (rather than hang the session) if a reader blocks on a FIFO."""

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"a reader blocked for {HANG_GUARD_S} s (opened a FIFO?)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(HANG_GUARD_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory, tiny_dirs) -> Path:
    src = tiny_dirs("llama")
    return write_sym(src, tmp_path_factory.mktemp("clean") / "c", sym_tensors(src))


def _copy(clean: Path, tmp_path: Path) -> Path:
    target = tmp_path / "c"
    shutil.copytree(clean, target)
    return target


@pytest.mark.parametrize("where", ["inside", "outside"])
def test_a_shard_that_is_a_fifo_is_refused_without_opening_it(clean: Path, tmp_path: Path, where: str) -> None:
    path = _copy(clean, tmp_path)
    (path / "model.safetensors").unlink()
    if where == "inside":
        os.mkfifo(path / "model.safetensors")
        expected = "a FIFO, not a regular file"
    else:
        os.mkfifo(tmp_path / "pipe")
        (path / "model.safetensors").symlink_to(tmp_path / "pipe")
        expected = "outside the checkpoint or model directory"
    with pytest.raises(SourceFormatError, match=expected):
        qhf.load_quantized(path)
    with pytest.raises(SourceFormatError, match=expected):
        qhf.export_dense(path, tmp_path / "dense")


def test_tokenizer_json_symlinked_outside_is_refused_by_name(clean: Path, tmp_path: Path) -> None:
    path = _copy(clean, tmp_path)
    shutil.move(path / "tokenizer.json", tmp_path / "elsewhere.json")
    (path / "tokenizer.json").symlink_to(tmp_path / "elsewhere.json")  # parses fine: still refused
    with pytest.raises(TokenizerError, match=r"tokenizer\.json: a symlink to .*outside"):
        qhf.load_quantized(path)
    with pytest.raises(SourceFormatError, match=r"tokenizer\.json: a symlink to .*outside"):
        qhf.export_dense(path, tmp_path / "dense")  # the export copies it: refused, nothing published
    assert not (tmp_path / "dense").exists()


def test_config_json_symlinked_to_a_system_file_is_refused_by_name(clean: Path, tmp_path: Path) -> None:
    path = _copy(clean, tmp_path)
    (path / "config.json").unlink()
    (path / "config.json").symlink_to("/etc/hostname")
    with pytest.raises(SourceFormatError, match=r"config\.json: a symlink to /etc/hostname, outside"):
        qhf.load_quantized(path)


@pytest.mark.parametrize(
    ("content", "expected"),
    [(b'{"bits": 4, "x": "\xff\xfe"}', "not UTF-8"), (b"[" * 200000 + b"]" * 200000, "nested too deeply")],
)
def test_a_bad_quantize_config_is_a_named_error(clean: Path, tmp_path: Path, content: bytes, expected: str) -> None:
    path = _copy(clean, tmp_path)
    (path / "quantize_config.json").write_bytes(content)
    with pytest.raises(SourceFormatError, match=rf"quantize_config\.json: .*{expected}"):
        qhf.load_quantized(path)
