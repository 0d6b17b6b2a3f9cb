"""Serialization writes canonical and alias fields, per family, and reads back to an equal config."""

from __future__ import annotations

import pytest
from qformats.config import QuantizeConfig, config_to_json, parse_config


def test_gptq_writes_method_format_and_their_aliases() -> None:
    out = QuantizeConfig(bits=4, group_size=128, sym=True, format="gptq").to_dict()
    assert list(out)[:10] == [
        "bits", "group_size", "desc_act", "sym", "lm_head", "method", "quant_method", "format",
        "checkpoint_format", "pack_dtype",
    ]  # fmt: skip
    assert "zero_point" not in out and "dynamic" not in out  # empty values dropped


def test_awq_writes_zero_point_and_version() -> None:
    out = QuantizeConfig(bits=4, group_size=128, sym=False, method="awq", format="gemv").to_dict()
    assert out["zero_point"] is True and out["version"] == "gemv" and "sym" not in out
    back = parse_config(out)
    assert back.sym is False and back.format == "gemv"


def test_gguf_writes_bits_alias_and_drops_group_fields() -> None:
    out = QuantizeConfig(bits="q4_k_m").to_dict()
    assert out["bits"] == "q4_k_m" and out["format"] == "q_k_m"
    assert "group_size" not in out and "pack_dtype" not in out and "desc_act" not in out
    assert parse_config(out).to_dict() == out


@pytest.mark.parametrize(
    "cfg",
    [
        QuantizeConfig(bits=8, method="fp8", format="float8_e4m3fn", settings={"weight_scale_method": "row"}),
        QuantizeConfig(bits=4, method="bitsandbytes", format="nf4", settings={"block_size": 64}),
        QuantizeConfig(bits=6, format="gptq_p", pack_dtype="int32", lm_head=True),
        QuantizeConfig(bits=2, format="gptq", pack_dtype="int16", desc_act=True, meta={"quantizer": ["x:1"]}),
    ],
)
def test_round_trip_equal(cfg: QuantizeConfig) -> None:
    assert parse_config(cfg.to_dict()) == cfg
    assert config_to_json(cfg).endswith("}\n")


def test_meta_records_the_config_version() -> None:
    out = QuantizeConfig().to_dict()
    assert out["meta"]["qformats_config_version"] == 1
