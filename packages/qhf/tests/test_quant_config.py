"""Normalizing the user's quantization settings and their serialized checkpoint form."""

from __future__ import annotations

import pytest
from qhf.quant_config import QuantConfigError, QuantSettings, parse_settings


def test_defaults_are_gptq_4bit_g128() -> None:
    s = parse_settings(None)
    assert (s.method, s.bits, s.group_size, s.sym, s.format) == ("gptq", 4, 128, True, "gptq")


def test_aliases_and_awq_zero_point() -> None:
    s = parse_settings({"quant_method": "awq", "w_bit": 4, "q_group_size": 64, "zero_point": True, "version": "GEMM"})
    assert (s.method, s.bits, s.group_size, s.sym, s.format) == ("awq", 4, 64, False, "gemm")
    d = s.to_checkpoint_dict()
    assert d["quant_method"] == d["method"] == "awq" and d["version"] == d["format"] == "gemm"
    assert d["zero_point"] is True and "sym" not in d


def test_gptq_dict_round_trips_through_parse() -> None:
    s = parse_settings({"method": "gptq", "bits": 3, "group_size": -1, "format": "gptq_v2", "damp_percent": 0.1})
    d = s.to_checkpoint_dict()
    assert d["checkpoint_format"] == "gptq_v2" and d["pack_dtype"] == "int32" and d["sym"] is True
    assert d["meta"]["quantizer"][0].startswith("lowbit-qhf:")
    again = parse_settings(d)
    assert again.to_checkpoint_dict() == d and again.damp_percent == 0.1


def test_rtn_exports_as_its_format_family() -> None:
    assert parse_settings({"method": "rtn", "format": "gemm"}).to_checkpoint_dict()["method"] == "awq"
    rtn = parse_settings({"method": "rtn"})
    assert rtn.to_checkpoint_dict()["method"] == "gptq"
    assert parse_settings(rtn.to_checkpoint_dict()).method == "rtn"  # meta.algorithm keeps the truth


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"method": "bogus"}, "method"),
        ({"method": "gptq", "format": "gemm"}, "format"),
        ({"bits": 9}, "bits"),
        ({"bits": True}, "bits"),
        ({"group_size": 0}, "group_size"),
    ],
)
def test_bad_settings_name_the_field(config: dict, field: str) -> None:
    with pytest.raises(QuantConfigError, match=field):
        parse_settings(config)


def test_objects_with_to_dict_and_settings_pass_through() -> None:
    class Cfg:
        def to_dict(self):
            return {"bits": 8, "group_size": 32}

    assert parse_settings(Cfg()).bits == 8
    s = QuantSettings(bits=2, group_size=64)
    assert parse_settings(s).bits == 2
    with pytest.raises(QuantConfigError):
        parse_settings(42)


def test_act_group_aware_defaults_as_the_reference() -> None:
    """GPT-QModel 7.7.0 turns group-aware reordering on for GPTQ unless desc_act; lowbit does too."""
    assert parse_settings({"method": "gptq", "group_size": 128}).act_group_aware is True
    assert parse_settings({"method": "gptq", "desc_act": True}).act_group_aware is False
    assert parse_settings({"method": "gptq", "group_size": -1}).act_group_aware is False  # no groups to order
    assert parse_settings({"method": "awq"}).act_group_aware is False
    assert parse_settings({"method": "rtn"}).act_group_aware is False
    assert parse_settings({"method": "gptq", "act_group_aware": False}).act_group_aware is False


def test_act_group_aware_conflicts_name_the_field() -> None:
    with pytest.raises(QuantConfigError, match="act_group_aware"):
        parse_settings({"method": "gptq", "desc_act": True, "act_group_aware": True})
    with pytest.raises(QuantConfigError, match="act_group_aware"):
        parse_settings({"method": "awq", "act_group_aware": True})


def test_act_group_aware_round_trips_through_the_checkpoint_dict() -> None:
    d = parse_settings({"method": "gptq"}).to_checkpoint_dict()
    assert d["meta"]["act_group_aware"] is True
    assert parse_settings(d).act_group_aware is True


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"bits": 4, "wbits": 8}, r"conflicting aliases for 'bits': bits=4, wbits=8"),
        ({"w_bit": 3, "bits": 4}, r"conflicting aliases for 'bits': bits=4, w_bit=3"),
        (
            {"group_size": 128, "q_group_size": 64},
            r"conflicting aliases for 'group_size': group_size=128, q_group_size=64",
        ),
        ({"method": "awq", "sym": True, "zero_point": True}, r"conflicting aliases: sym=True but zero_point=True"),
        ({"method": "bitsandbytes", "block_size": 64, "bnb_block_size": 128}, r"block_size=64, bnb_block_size=128"),
    ],
)
def test_conflicting_aliases_are_refused_naming_both_fields(config: dict, match: str) -> None:
    """qhf parses through qformats: two names of one field that disagree are an error, never a silent pick."""
    with pytest.raises(QuantConfigError, match=match):
        parse_settings(config)


def test_agreeing_aliases_and_format_precedence_follow_qformats() -> None:
    assert parse_settings({"bits": 3, "wbits": 3, "group_size": 64, "q_group_size": 64}).bits == 3
    # checkpoint_format is only a hint (the reference's rule): an explicit format wins, and the config says so
    s = parse_settings({"format": "gptq_v2", "checkpoint_format": "gptq"})
    assert s.format == "gptq_v2"
    assert s.config is not None and any("takes precedence over checkpoint_format" in n for n in s.config.notes)


def test_the_settings_carry_the_parsed_qformats_config() -> None:
    from qformats.config import QuantizeConfig
    from qformats.enums import METHOD

    s = parse_settings({"method": "rtn", "format": "gemm", "bits": 4, "group_size": 64, "damp_percent": 0.1, "foo": 1})
    assert isinstance(s.config, QuantizeConfig)
    assert (s.config.method, s.config.format, s.config.group_size) == (METHOD.AWQ, "gemm", 64)
    assert s.config.unknown == {"foo": 1}  # unknown keys live in the config, not in a second settings field
    assert "extra" not in QuantSettings.__dataclass_fields__
    assert (s.method, s.format, s.damp_percent) == ("rtn", "gemm", 0.1)
