"""The checkpoint reader reads its config through ``qformats.config`` and checks modules against it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from checkpoint_fixtures import AWQ_CONFIG, build, module_tensors
from qformats import validate
from qformats.checkpoint import dequantize_checkpoint, open_checkpoint, read_quant_fields, write_checkpoint
from qformats.config import QuantizeConfig, parse_config
from qformats.errors import CheckpointFormatError, ConfigError
from qformats.inspect import inspect
from random_weights import random_weight


def test_fields_carry_the_parsed_config() -> None:
    raw = {"w_bit": 4, "q_group_size": 64, "version": "gemv", "quant_method": "awq", "zero_point": True}
    fields = read_quant_fields(raw)
    assert isinstance(fields.config, QuantizeConfig)
    assert fields.config == parse_config(raw)
    assert (fields.layout, fields.config.layout) == ("gemv", "gemv")


def test_conflicting_aliases_are_refused_by_the_reader(tmp_path: Path) -> None:
    # The checkpoint reader used to pick the first alias silently; the config parser refuses the conflict.
    build(tmp_path / "ck")
    (tmp_path / "ck" / "quantize_config.json").write_text(json.dumps(dict(AWQ_CONFIG, wbits=8)))
    with pytest.raises(ConfigError, match=r"quantize_config\.json.*conflicting aliases for 'bits'"):
        open_checkpoint(tmp_path / "ck")


def test_gemv_fast_words_are_int16_without_a_pack_dtype_field() -> None:
    fields = read_quant_fields({"bits": 4, "group_size": 128, "quant_method": "awq", "version": "gemv_fast"})
    assert (fields.layout, fields.pack_dtype) == ("gemv_fast", "int16")
    assert any("int16" in note for note in fields.config.notes)  # type: ignore[union-attr]


def test_awq_marlin_config_validates_against_the_awq_marlin_layout() -> None:
    cfg = parse_config({"bits": 4, "group_size": 32, "quant_method": "awq", "format": "marlin", "zero_point": True})
    assert cfg.layout == "awq_marlin"
    weights = {"m.proj": random_weight(np.random.default_rng(3), 64, 128, 4, 32)}
    tensors = module_tensors("awq_marlin", weights)
    assert validate(tensors, cfg, shapes={"m.proj": (128, 64)}) == []


def _excluded_but_packed(path: Path) -> None:
    build(path)
    dynamic = {r"-:model\.layers\.1\.": {}}
    (path / "quantize_config.json").write_text(json.dumps(dict(AWQ_CONFIG, dynamic=dynamic)))


def test_packed_module_under_a_negative_rule_is_a_violation(tmp_path: Path) -> None:
    _excluded_but_packed(tmp_path / "ck")
    ck = open_checkpoint(tmp_path / "ck")
    problems = ck.validate()
    assert [v.rule for v in problems["model.layers.1.mlp.up_proj"]] == ["CONFIG-EXCLUDED"]
    assert problems["model.layers.1.mlp.up_proj"][0].tensor == "model.layers.1.mlp.up_proj.qweight"
    with pytest.raises(CheckpointFormatError, match=r"CONFIG-EXCLUDED.*layers\.1\.mlp\.up_proj\.qweight"):
        ck.dense_names()
    summary = inspect(tmp_path / "ck")
    assert summary.dense_tensors == len(ck.dense_names(strict=False))


def test_dequantizing_refuses_packed_tensors_the_config_keeps_dense(tmp_path: Path) -> None:
    _excluded_but_packed(tmp_path / "ck")
    with pytest.raises(CheckpointFormatError, match="CONFIG-EXCLUDED"):
        dequantize_checkpoint(tmp_path / "ck", tmp_path / "dense")
    assert not (tmp_path / "dense").exists()


def test_unpack_refuses_a_module_that_breaks_its_layout(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    tensors = module_tensors("gemm", {"m.proj": random_weight(rng, 64, 128, 4, 32)})
    write_checkpoint(tmp_path / "ck", tensors, quantize_config=AWQ_CONFIG)
    ck = open_checkpoint(tmp_path / "ck")
    entry = ck.modules()[0]
    bad = ck.module_tensors(entry)
    bad["qzeros"] = bad["qzeros"][:1]
    with pytest.raises(CheckpointFormatError, match=r"m\.proj.*AWQ-GEMM-SHAPE-QZEROS"):
        ck.unpack(entry, bad)


@pytest.mark.parametrize("quantizer", [["gptqmodel:7.7.0"], None])
def test_reference_writer_is_recognised_from_the_parsed_config_meta(tmp_path: Path, quantizer: object) -> None:
    # GPT-QModel's v1 words are true-zero words minus 0x11111111: a true zero of 0 borrows from its neighbour.
    from qformats.layouts.gptq.zeros import v2_to_v1
    from qformats.transcode import transcode_weight

    w = random_weight(np.random.default_rng(8), 16, 64, 4, 32)
    zeros = np.asarray(w.zeros).copy()
    zeros[0, :3] = 0
    w = replace(w, zeros=zeros)
    tensors = dict(transcode_weight(w, "gptq_v2").tensors)
    tensors["qzeros"] = v2_to_v1(tensors["qzeros"], 4).qzeros
    config = {"bits": 4, "group_size": 32, "sym": False, "quant_method": "gptq", "format": "gptq"}
    if quantizer is not None:
        config["meta"] = {"quantizer": quantizer}
    write_checkpoint(tmp_path / "ck", {f"m.proj.{k}": v for k, v in tensors.items()}, quantize_config=None)
    (tmp_path / "ck" / "quantize_config.json").write_text(json.dumps(config))
    ck = open_checkpoint(tmp_path / "ck")
    assert ck.written_by_reference() is (quantizer is not None)
    # Read field by field (no GPT-QModel quantizer named), the zero-0 fields come back as 16.
    assert ck.unpack(ck.modules()[0]).equals(w) is (quantizer is not None)
