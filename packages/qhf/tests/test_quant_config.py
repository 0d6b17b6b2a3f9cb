"""Reading the user's quantization config into the one ``QuantizeConfig`` and its stored checkpoint form."""

from __future__ import annotations

import pytest
from qformats.config import QuantizeConfig
from qhf.checkpoint_config import checkpoint_dict
from qhf.config_view import algorithm, setting
from qhf.quant_config import QuantConfigError, read_quantize_config


def _summary(cfg: QuantizeConfig) -> tuple:
    return (algorithm(cfg), cfg.width, cfg.group_size, cfg.sym, cfg.format)


def test_defaults_are_gptq_4bit_g128() -> None:
    assert _summary(read_quantize_config(None)) == ("gptq", 4, 128, True, "gptq")


def test_aliases_and_awq_zero_point() -> None:
    cfg = read_quantize_config(
        {"quant_method": "awq", "w_bit": 4, "q_group_size": 64, "zero_point": True, "version": "GEMM"}
    )
    assert _summary(cfg) == ("awq", 4, 64, False, "gemm")
    d = checkpoint_dict(cfg)
    assert d["quant_method"] == d["method"] == "awq" and d["version"] == d["format"] == "gemm"
    assert d["zero_point"] is True and "sym" not in d


def test_gptq_dict_round_trips_through_the_reader() -> None:
    cfg = read_quantize_config(
        {"method": "gptq", "bits": 3, "group_size": -1, "format": "gptq_v2", "damp_percent": 0.1}
    )
    d = checkpoint_dict(cfg)
    assert d["checkpoint_format"] == "gptq_v2" and d["pack_dtype"] == "int32" and d["sym"] is True
    assert d["meta"]["quantizer"][0].startswith("lowbit-qhf:")
    again = read_quantize_config(d)
    assert checkpoint_dict(again) == d and setting(again, "damp_percent") == 0.1


def test_rtn_exports_as_its_format_family() -> None:
    assert checkpoint_dict(read_quantize_config({"method": "rtn", "format": "gemm"}))["method"] == "awq"
    rtn = read_quantize_config({"method": "rtn"})
    assert checkpoint_dict(rtn)["method"] == "gptq"
    assert algorithm(read_quantize_config(checkpoint_dict(rtn))) == "rtn"  # meta.algorithm keeps the truth


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
        read_quantize_config(config)


def test_objects_with_to_dict_and_configs_pass_through() -> None:
    class Cfg:
        def to_dict(self):
            return {"bits": 8, "group_size": 32}

    assert read_quantize_config(Cfg()).bits == 8
    built = QuantizeConfig(bits=2, group_size=64)  # built in code: read (checked, resolved) like a dict
    assert read_quantize_config(built).bits == 2 and setting(read_quantize_config(built), "damp_percent") == 0.05
    with pytest.raises(QuantConfigError):
        read_quantize_config(42)


def test_reading_a_read_config_gives_an_equal_config() -> None:
    for raw in ({"method": "rtn", "format": "gemm"}, {"method": "gptq", "gptaq": {}}, {"method": "gguf", "bits": 5}):
        cfg = read_quantize_config(raw)
        assert read_quantize_config(cfg) == cfg and checkpoint_dict(read_quantize_config(cfg)) == checkpoint_dict(cfg)


def test_act_group_aware_defaults_as_the_reference() -> None:
    """GPT-QModel 7.7.0 turns group-aware reordering on for GPTQ unless desc_act; lowbit does too."""

    def gar(config: dict) -> bool:
        return setting(read_quantize_config(config), "act_group_aware")

    assert gar({"method": "gptq", "group_size": 128}) is True
    assert gar({"method": "gptq", "desc_act": True}) is False
    assert gar({"method": "gptq", "group_size": -1}) is False  # no groups to order
    assert gar({"method": "awq"}) is False
    assert gar({"method": "rtn"}) is False
    assert gar({"method": "gptq", "act_group_aware": False}) is False


def test_act_group_aware_conflicts_name_the_field() -> None:
    with pytest.raises(QuantConfigError, match="act_group_aware"):
        read_quantize_config({"method": "gptq", "desc_act": True, "act_group_aware": True})
    with pytest.raises(QuantConfigError, match="act_group_aware"):
        read_quantize_config({"method": "awq", "act_group_aware": True})


def test_act_group_aware_round_trips_through_the_checkpoint_dict() -> None:
    d = checkpoint_dict(read_quantize_config({"method": "gptq"}))
    assert d["meta"]["act_group_aware"] is True
    assert setting(read_quantize_config(d), "act_group_aware") is True


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
        read_quantize_config(config)


def test_agreeing_aliases_and_format_precedence_follow_qformats() -> None:
    assert read_quantize_config({"bits": 3, "wbits": 3, "group_size": 64, "q_group_size": 64}).bits == 3
    # checkpoint_format is only a hint (the reference's rule): an explicit format wins, and the config says so
    cfg = read_quantize_config({"format": "gptq_v2", "checkpoint_format": "gptq"})
    assert cfg.format == "gptq_v2"
    assert any("takes precedence over checkpoint_format" in n for n in cfg.notes)


def test_the_config_is_the_qformats_config() -> None:
    from qformats.enums import METHOD

    cfg = read_quantize_config(
        {"method": "rtn", "format": "gemm", "bits": 4, "group_size": 64, "damp_percent": 0.1, "foo": 1}
    )
    assert isinstance(cfg, QuantizeConfig)
    assert (cfg.method, cfg.format, cfg.group_size) == (METHOD.AWQ, "gemm", 64)
    assert cfg.unknown == {"foo": 1}  # unknown keys live in the config, not in a second settings object
    assert (algorithm(cfg), setting(cfg, "damp_percent")) == ("rtn", 0.1)
    with pytest.raises(KeyError, match="weight_block_size"):
        setting(cfg, "weight_block_size")  # a weight-only setting: not resolved for a calibrated run


def test_the_calibration_record_is_not_a_setting() -> None:
    """The default mixture's record is written under ``meta.calibration`` by the writer; reading it back keeps it
    in ``meta`` (a fact of the run), never in the resolved settings."""
    cfg = read_quantize_config({"method": "gptq"})
    d = checkpoint_dict(cfg, {"documentation_rows": 4})
    assert d["meta"]["calibration"] == {"documentation_rows": 4} and "calibration" not in checkpoint_dict(cfg)["meta"]
    back = read_quantize_config(d)
    assert "calibration" not in back.settings and checkpoint_dict(back)["meta"].get("calibration") is None
