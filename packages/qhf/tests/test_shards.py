"""Shard planning, size parsing and the atomic shard/index writer."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from qhf.save.shards import ShardSizeError, TensorEntry, parse_size, plan_shards, write_shards
from safetensors import safe_open


def test_parse_size_binary_units() -> None:
    assert parse_size("4GB") == 4 * 1024**3
    assert parse_size("10KB") == 10 * 1024
    assert parse_size("512MiB") == 512 * 1024**2
    assert parse_size(1000) == 1000
    for bad in ("", "-1GB", "lots", 0, "0MB"):
        with pytest.raises(ShardSizeError, match="max_shard_size"):
            parse_size(bad)


def _entries(sizes: list[int]) -> list[TensorEntry]:
    return [TensorEntry(f"t{i:02d}", n * 4, lambda n=n, i=i: torch.full((n,), float(i))) for i, n in enumerate(sizes)]


def test_plan_is_greedy_and_oversized_tensors_stand_alone() -> None:
    plan = plan_shards(_entries([10, 10, 30, 5, 5]), 80)
    assert [[e.name for e in s] for s in plan] == [["t00", "t01"], ["t02"], ["t03", "t04"]]


def test_single_shard_has_no_index(tmp_path) -> None:
    paths = write_shards(tmp_path, _entries([3, 4]), "1MB", metadata={"who": "me"})
    assert [p.name for p in paths] == ["model.safetensors"]
    assert not (tmp_path / "model.safetensors.index.json").exists()
    with safe_open(str(paths[0]), framework="pt") as f:
        assert f.metadata() == {"who": "me", "format": "pt"}
        assert torch.equal(f.get_tensor("t01"), torch.full((4,), 1.0))


def test_sharded_write_index_and_stale_cleanup(tmp_path) -> None:
    write_shards(tmp_path, _entries([10] * 6), 80)  # 3 shards
    assert len(list(tmp_path.glob("model-*-of-00003.safetensors"))) == 3
    paths = write_shards(tmp_path, _entries([10] * 4), 80)  # now 2 shards: the 3-shard files must go
    assert sorted(p.name for p in tmp_path.glob("model*.safetensors")) == [p.name for p in paths]
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == 4 * 10 * 4
    assert list(index["weight_map"]) == sorted(index["weight_map"])
    assert index["weight_map"]["t03"] == "model-00002-of-00002.safetensors"
    write_shards(tmp_path, _entries([1]), 80)  # back to one file: index removed
    assert not (tmp_path / "model.safetensors.index.json").exists()
    assert [p.name for p in tmp_path.glob("model*.safetensors")] == ["model.safetensors"]


def test_numpy_tensors_and_duplicates(tmp_path) -> None:
    arr = np.arange(6, dtype=np.int32).reshape(2, 3)
    write_shards(tmp_path, [TensorEntry("a.qweight", arr.nbytes, lambda: arr)], "1MB")
    with safe_open(str(tmp_path / "model.safetensors"), framework="np") as f:
        assert np.array_equal(f.get_tensor("a.qweight"), arr)
    with pytest.raises(ValueError, match="named twice"):
        write_shards(tmp_path, [TensorEntry("x", 4, lambda: arr)] * 2, "1MB")
