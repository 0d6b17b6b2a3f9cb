"""qformats.checkpoint.streamed_shard: a shard written tensor by tensor has write_safetensors' bytes, keeps no
array alive, and leaves no temporary behind."""

from __future__ import annotations

import gc
import os
import weakref
from pathlib import Path

import numpy as np
import pytest
from qformats.checkpoint import streamed_shard
from qformats.checkpoint.safetensors_io import write_safetensors
from qformats.checkpoint.streamed_shard import StreamedShard
from qformats.checkpoint.writer import write_checkpoint


def _tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "z.qweight": rng.integers(-(2**31), 2**31 - 1, (16, 8), dtype=np.int32),
        "a.scales": rng.random((2, 8)).astype(np.float16),
        "m.weight": rng.random((8, 12)).astype(np.float32),  # stored as BF16
        "f.weight": rng.integers(0, 255, (4, 4), dtype=np.uint8),  # stored as F8_E4M3
        "b.bias": rng.random(8).astype(np.float32),
        "s.scalar": np.array(3.5, dtype=np.float32),
        "c.codes": rng.integers(0, 15, (3, 5), dtype=np.uint8),
    }


@pytest.mark.parametrize("checksums", [True, False])
def test_the_same_bytes_as_writing_the_whole_dict(tmp_path: Path, checksums: bool) -> None:
    tensors = _tensors()
    dtypes = {"m.weight": "BF16", "f.weight": "F8_E4M3"}
    metadata = {"format": "pt", "quantizer": "lowbit"}
    whole = write_safetensors(tmp_path / "whole.safetensors", tensors, metadata, dtypes, checksums=checksums)
    shard = StreamedShard(tmp_path / "streamed.safetensors", metadata, dtypes, checksums=checksums)
    for name, value in tensors.items():
        shard.add(name, value)
    assert shard.finish() == whole
    assert (tmp_path / "streamed.safetensors").read_bytes() == (tmp_path / "whole.safetensors").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["streamed.safetensors", "whole.safetensors"]


def test_the_copy_through_memory_gives_the_same_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the kernel refuses ``copy_file_range`` the ranges are read and written in chunks."""
    tensors = _tensors()

    def refuse(*args: object) -> int:
        raise OSError(38, "not supported")

    monkeypatch.setattr(os, "copy_file_range", refuse, raising=False)
    monkeypatch.setattr(streamed_shard, "COPY_CHUNK", 7)
    write_safetensors(tmp_path / "whole.safetensors", tensors, checksums=True)
    shard = StreamedShard(tmp_path / "streamed.safetensors", checksums=True)
    for name, value in tensors.items():
        shard.add(name, value)
    shard.finish()
    assert (tmp_path / "streamed.safetensors").read_bytes() == (tmp_path / "whole.safetensors").read_bytes()


def test_the_writer_keeps_no_written_array_alive(tmp_path: Path) -> None:
    """A streamed tensor is released while its shard is still being filled (the whole shard was held before)."""
    alive: list[weakref.ref[np.ndarray]] = []
    seen_alive: list[int] = []

    def tensors():
        for k in range(6):
            arr = np.full((64, 64), k, dtype=np.float32)
            alive.append(weakref.ref(arr))
            gc.collect()
            seen_alive.append(sum(ref() is not None for ref in alive[:-1]))
            yield f"layer.{k}.weight", arr
            del arr

    write_checkpoint(tmp_path / "ckpt", tensors(), quantize_config=None, max_shard_size="1GB", validate=False)
    assert seen_alive == [0] * 6
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == ["model.safetensors"]


def test_a_failed_finish_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shard = StreamedShard(tmp_path / "x.safetensors", checksums=True)
    shard.add("a", np.zeros(4, dtype=np.float32))

    def fail(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(streamed_shard, "_copy_range", fail)
    with pytest.raises(OSError, match="No space"):
        shard.finish()
    assert list(tmp_path.iterdir()) == []
