"""Checkpoint directories: sharded write/read, index checks, config priority, refusals, atomic writes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from checkpoint_fixtures import AWQ_CONFIG, build, module_tensors
from qformats.checkpoint import (
    dequantize_checkpoint,
    find_quant_config,
    open_checkpoint,
    parse_shard_size,
    read_quant_fields,
    write_checkpoint,
)
from qformats.checkpoint.safetensors_io import SafetensorsFile, write_safetensors
from qformats.errors import CheckpointFormatError, ConfigError
from random_weights import random_weight


def test_single_file_round_trip(tmp_path: Path) -> None:
    weights = build(tmp_path / "ck")
    names = sorted(p.name for p in (tmp_path / "ck").iterdir())
    assert names == ["config.json", "model.safetensors", "quantize_config.json"]
    ck = open_checkpoint(tmp_path / "ck")
    assert [m.prefix for m in ck.modules()] == sorted(weights)
    assert ck.validate() == {}
    for entry in ck.modules():
        assert ck.unpack(entry).equals(weights[entry.prefix])
    assert sorted(ck.dense_names()) == sorted([f"{p}.bias" for p in weights] + ["model.norm.weight"])


def test_sharded_write_splits_a_module_across_files_and_reads_back(tmp_path: Path) -> None:
    weights = build(tmp_path / "ck", max_shard_size=3000)
    index = json.loads((tmp_path / "ck" / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 2 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    assert list(index["weight_map"]) == sorted(index["weight_map"])
    ck = open_checkpoint(tmp_path / "ck")
    assert index["metadata"]["total_size"] == ck.total_size()
    split = [e for e in ck.modules() if len({ck.weight_map[n] for n in e.tensors.values()}) > 1]
    assert split, "the shard size must split at least one module's tensors across files"
    for entry in ck.modules():
        assert ck.unpack(entry).equals(weights[entry.prefix])
    shard = SafetensorsFile(tmp_path / "ck" / shards[0])
    assert shard.metadata["format"] == "pt" and set(shard.metadata) == {"format", "qformats.crc32"}
    assert set(shard.checksums) == set(shard.tensors)


def test_rewrite_removes_stale_shards_and_index(tmp_path: Path) -> None:
    build(tmp_path / "ck", max_shard_size=3000)
    build(tmp_path / "ck")
    names = sorted(p.name for p in (tmp_path / "ck").iterdir())
    assert names == ["config.json", "model.safetensors", "quantize_config.json"]


def test_both_config_files_hold_the_same_dict(tmp_path: Path) -> None:
    build(tmp_path / "ck")
    qc = json.loads((tmp_path / "ck" / "quantize_config.json").read_text())
    cfg = json.loads((tmp_path / "ck" / "config.json").read_text())
    assert cfg["quantization_config"] == qc == AWQ_CONFIG
    assert cfg["model_type"] == "llama"


def test_config_priority_follows_the_reference(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": {"bits": 8}}))
    assert find_quant_config(tmp_path)[1] == {"bits": 8}
    (tmp_path / "quant_config.json").write_text(json.dumps({"bits": 3}))
    assert find_quant_config(tmp_path)[1] == {"bits": 3}
    (tmp_path / "quantize_config.json").write_text(json.dumps({"bits": 2}))
    path, raw = find_quant_config(tmp_path)
    assert path.name == "quantize_config.json" and raw == {"bits": 2}


def test_config_aliases_are_normalized() -> None:
    f = read_quant_fields(
        {"w_bit": 4, "q_group_size": 64, "version": "GEMV", "quant_method": "awq", "zero_point": True}
    )
    assert (f.bits, f.group_size, f.layout, f.sym, f.method) == (4, 64, "gemv", False, "awq")
    llm = read_quant_fields({"bits": 4, "group_size": 128, "quant_method": "awq", "backend": "llm-awq"})
    assert (llm.layout, llm.pack_dtype) == ("llm-awq", "int16")
    marlin = read_quant_fields({"bits": 4, "group_size": 128, "quant_method": "awq", "format": "marlin"})
    assert marlin.layout == "awq_marlin"
    with pytest.raises(ConfigError, match="is_marlin_format"):
        read_quant_fields({"bits": 4, "is_marlin_format": True})
    with pytest.raises(ConfigError, match="bits"):
        read_quant_fields({"group_size": 128})


def test_no_config_is_a_named_error(tmp_path: Path) -> None:
    write_safetensors(tmp_path / "model.safetensors", {"w": np.zeros(2, np.float32)})
    with pytest.raises(CheckpointFormatError, match=r"quantize_config\.json"):
        open_checkpoint(tmp_path)


@pytest.mark.parametrize("name", ["pytorch_model.bin", "model.pt"])
def test_pickle_weights_are_refused_with_a_conversion_hint(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_bytes(b"\x80\x04not really a pickle")
    (tmp_path / "quantize_config.json").write_text(json.dumps(AWQ_CONFIG))
    with pytest.raises(CheckpointFormatError, match=r"weights_only=True.*save_file"):
        open_checkpoint(tmp_path)
    with pytest.raises(CheckpointFormatError, match="refused"):
        open_checkpoint(tmp_path / name)


def test_missing_index_entry_is_refused(tmp_path: Path) -> None:
    build(tmp_path / "ck", max_shard_size=3000)
    index_path = tmp_path / "ck" / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    dropped = sorted(index["weight_map"])[0]
    del index["weight_map"][dropped]
    index_path.write_text(json.dumps(index))
    with pytest.raises(CheckpointFormatError, match=f"{dropped!r}.*no index entry"):
        open_checkpoint(tmp_path / "ck")


def test_index_pointing_at_an_absent_tensor_or_shard_is_refused(tmp_path: Path) -> None:
    build(tmp_path / "ck", max_shard_size=3000)
    index_path = tmp_path / "ck" / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    first = sorted(index["weight_map"])[0]
    index["weight_map"]["ghost.qweight"] = index["weight_map"][first]
    index_path.write_text(json.dumps(index))
    with pytest.raises(CheckpointFormatError, match=r"'ghost\.qweight' is indexed"):
        open_checkpoint(tmp_path / "ck")
    index["weight_map"]["ghost.qweight"] = "model-00099-of-00099.safetensors"
    index_path.write_text(json.dumps(index))
    with pytest.raises(CheckpointFormatError, match="missing"):
        open_checkpoint(tmp_path / "ck")


def test_duplicate_tensor_across_unindexed_files_is_refused(tmp_path: Path) -> None:
    write_safetensors(tmp_path / "a.safetensors", {"w": np.zeros(2, np.float32)})
    write_safetensors(tmp_path / "b.safetensors", {"w": np.zeros(2, np.float32)})
    (tmp_path / "quantize_config.json").write_text(json.dumps(AWQ_CONFIG))
    with pytest.raises(CheckpointFormatError, match="duplicate tensor name 'w'"):
        open_checkpoint(tmp_path)


def test_duplicate_names_in_a_write_leave_nothing_behind(tmp_path: Path) -> None:
    pairs = [("a", np.zeros(2, np.float32)), ("a", np.ones(2, np.float32))]
    with pytest.raises(CheckpointFormatError, match="duplicate tensor name 'a'"):
        write_checkpoint(tmp_path / "out", pairs, quantize_config=None)
    assert not (tmp_path / "out").exists()


def test_shapes_that_disagree_with_the_config_are_refused_and_nothing_is_written(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    tensors = module_tensors("gemm", {"m.proj": random_weight(rng, 64, 128, 4, 32)})
    config = dict(AWQ_CONFIG, group_size=64)  # scales have 4 groups of 32, config says 2 groups of 64
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("untouched")
    with pytest.raises(CheckpointFormatError, match=r"m\.proj.*AWQ-GEMM-SHAPE"):
        write_checkpoint(tmp_path / "out", tensors, quantize_config=config)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["keep.txt"]


def test_reading_a_checkpoint_whose_shapes_disagree_names_the_module(tmp_path: Path) -> None:
    build(tmp_path / "ck")
    qc_path = tmp_path / "ck" / "quantize_config.json"
    qc_path.write_text(json.dumps(dict(AWQ_CONFIG, group_size=64)))
    ck = open_checkpoint(tmp_path / "ck")
    problems = ck.validate()
    assert set(problems) == {m.prefix for m in ck.modules()}
    assert {v.rule for v in problems["model.layers.0.mlp.up_proj"]} == {
        "AWQ-GEMM-SHAPE-QZEROS",
        "AWQ-GEMM-SHAPE-SCALES",
    }
    with pytest.raises(CheckpointFormatError, match=r"model\.layers\.0\.mlp\.up_proj"):
        ck.unpack(ck.modules()[0])


def test_dynamic_negative_rule_keeps_a_module_dense(tmp_path: Path) -> None:
    build(tmp_path / "ck")
    qc_path = tmp_path / "ck" / "quantize_config.json"
    qc_path.write_text(json.dumps(dict(AWQ_CONFIG, dynamic={r"-:model\.layers\.1\.": {}})))
    ck = open_checkpoint(tmp_path / "ck")
    assert [m.prefix for m in ck.modules()] == ["model.layers.0.mlp.up_proj", "model.layers.2.mlp.up_proj"]


def test_streamed_dequantization_of_a_sharded_checkpoint(tmp_path: Path) -> None:
    weights = build(tmp_path / "ck", max_shard_size=3000)
    report = dequantize_checkpoint(tmp_path / "ck", tmp_path / "dense", max_shard_size="8KB")
    assert "quantize_config.json" not in report.files
    cfg = json.loads((tmp_path / "dense" / "config.json").read_text())
    assert "quantization_config" not in cfg and cfg["model_type"] == "llama"
    index = json.loads((tmp_path / "dense" / "model.safetensors.index.json").read_text())
    for prefix, w in weights.items():
        name = f"{prefix}.weight"
        got = SafetensorsFile(tmp_path / "dense" / index["weight_map"][name]).load(name)
        assert got.dtype == np.float16 and np.array_equal(got, w.dequantize().astype(np.float16))
        bias = SafetensorsFile(tmp_path / "dense" / index["weight_map"][f"{prefix}.bias"]).load(f"{prefix}.bias")
        assert np.array_equal(bias, np.linspace(-1, 1, 64).astype(np.float16))
    assert not any(n.endswith((".qweight", ".qzeros", ".scales")) for n in index["weight_map"])


def test_gptq_checkpoint_reads_through_the_gptq_layouts(tmp_path: Path) -> None:
    weights = build(tmp_path / "ck", layout="gptq", sym=True)
    ck = open_checkpoint(tmp_path / "ck")
    assert ck.fields.layout == "gptq"
    for entry in ck.modules():
        assert ck.unpack(entry).equals(weights[entry.prefix])


def test_shard_size_strings_use_binary_units() -> None:
    assert parse_shard_size("4GB") == 4 << 30
    assert parse_shard_size("500MB") == 500 << 20
    assert parse_shard_size("1GiB") == 1 << 30
    assert parse_shard_size(4096) == 4096
    with pytest.raises(ConfigError, match="max_shard_size"):
        parse_shard_size("lots")


def test_row_blocked_dense_weight_is_bit_identical_to_the_logical_formula() -> None:
    from qformats.checkpoint.dequantize import dense_weight

    w = random_weight(np.random.default_rng(12), 300, 256, 4, 64, act_order=True)
    assert np.array_equal(dense_weight(w, "float32", rows=7), w.dequantize())
    assert np.array_equal(dense_weight(w), w.dequantize().astype(np.float16))


@pytest.mark.parametrize(("written_as", "expected"), [("gptq_v2", "gptq_v2"), ("gptq", "gptq"), ("marlin", "marlin")])
def test_marlin_labelled_checkpoints_are_read_by_their_tensor_shapes(
    tmp_path: Path, written_as: str, expected: str
) -> None:
    # The reference writes format "marlin" with ordinary GPTQ tensors and re-tiles at load time.
    rng = np.random.default_rng(13)
    weights = {"m.proj": random_weight(rng, 64, 128, 4, 32, sym=True)}
    config = {"bits": 4, "group_size": 32, "sym": True, "quant_method": "gptq", "format": "marlin"}
    write_checkpoint(tmp_path / "ck", module_tensors(written_as, weights), quantize_config=None)
    (tmp_path / "ck" / "quantize_config.json").write_text(json.dumps(config))
    ck = open_checkpoint(tmp_path / "ck")
    assert [e.layout for e in ck.modules()] == [expected]
    assert ck.unpack(ck.modules()[0]).equals(weights["m.proj"])
    assert bool(ck.warnings) is (written_as != "marlin")


def test_awq_marlin_label_with_gemm_tensors_reads_as_gemm(tmp_path: Path) -> None:
    weights = {"m.proj": random_weight(np.random.default_rng(14), 64, 128, 4, 32)}
    config = {"bits": 4, "group_size": 32, "zero_point": True, "quant_method": "awq", "format": "marlin"}
    write_checkpoint(tmp_path / "ck", module_tensors("gemm", weights), quantize_config=config)
    ck = open_checkpoint(tmp_path / "ck")
    assert [e.layout for e in ck.modules()] == ["gemm"]
    assert ck.unpack(ck.modules()[0]).equals(weights["m.proj"])
