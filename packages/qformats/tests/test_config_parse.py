"""Parsing quantization configs: aliases, method/format rules, planar routing, unknown fields, errors."""

from __future__ import annotations

import pytest
from qformats.config import QuantizeConfig, parse_config
from qformats.enums import FORMAT, METHOD
from qformats.errors import ConfigError, QFormatsError


def test_reference_example_round_trips() -> None:
    raw = {
        "bits": 4, "group_size": 128, "desc_act": False, "sym": True, "method": "gptq",
        "quant_method": "gptq", "format": "gptq", "checkpoint_format": "gptq", "pack_dtype": "int32",
    }  # fmt: skip
    cfg = parse_config(raw)
    assert (cfg.bits, cfg.group_size, cfg.sym, cfg.method, cfg.format) == (4, 128, True, METHOD.GPTQ, "gptq")
    written = cfg.to_dict()
    for key, value in raw.items():
        assert written[key] == value
    assert parse_config(written) == cfg


@pytest.mark.parametrize(
    ("raw", "expect"),
    [
        ({"w_bit": 4, "q_group_size": 64, "zero_point": True, "version": "GEMM", "quant_method": "awq"},
         {"bits": 4, "group_size": 64, "sym": False, "format": "gemm", "method": METHOD.AWQ}),
        ({"wbits": 8, "group_size": 32, "sym": True}, {"bits": 8, "format": "gptq", "method": METHOD.GPTQ}),
        ({"BITS": 3, "Checkpoint_Format": "gptq_v2"}, {"bits": 3, "format": "gptq_v2"}),
        ({"quant_method": "bitsandbytes", "bits": 4, "bnb_quant_type": "nf4", "bnb_block_size": 128},
         {"format": "nf4", "method": METHOD.BITSANDBYTES}),
        ({"quant_method": "fp8", "format": "float8_e5m2", "group_size": 128, "desc_act": True},
         {"bits": 8, "group_size": -1, "desc_act": False, "format": "float8_e5m2"}),
        ({"bits": "q4_k_m"}, {"bits": 4, "format": "q_k_m", "method": METHOD.GGUF}),
        ({"quant_method": "gguf", "bits": 6}, {"format": "q_k", "method": METHOD.GGUF}),
    ],
)  # fmt: skip
def test_aliases(raw: dict[str, object], expect: dict[str, object]) -> None:
    cfg = parse_config(raw)
    for key, value in expect.items():
        assert getattr(cfg, key) == value, key
    assert any("alias" in n or "format" in n or "sym" in n for n in cfg.notes) or not cfg.notes


def test_bnb_alias_settings_are_canonical() -> None:
    cfg = parse_config({"quant_method": "bitsandbytes", "bits": 4, "bnb_quant_type": "nf4", "bnb_block_size": 128})
    assert cfg.settings["block_size"] == 128
    assert cfg.family is FORMAT.BITSANDBYTES


def test_is_marlin_format_is_refused() -> None:
    with pytest.raises(ConfigError, match="is_marlin_format"):
        parse_config({"bits": 4, "is_marlin_format": False})


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"bits": 4, "wbits": 8}, "bits"),
        ({"group_size": 128, "q_group_size": 64}, "group_size"),
        ({"sym": True, "zero_point": True}, "sym"),
    ],
)
def test_conflicting_aliases_are_errors(raw: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError, match=f"conflicting aliases.*{field}"):
        parse_config(raw)


def test_format_wins_over_checkpoint_format_and_later_method_wins() -> None:
    cfg = parse_config({"format": "gptq_v2", "checkpoint_format": "gptq", "bits": 4})
    assert cfg.format == "gptq_v2"
    assert any("takes precedence" in n for n in cfg.notes)
    cfg = parse_config({"method": "gptq", "quant_method": "awq", "bits": 4})
    assert cfg.method is METHOD.AWQ and cfg.format == "gemm"
    assert any("file order" in n for n in cfg.notes)


def test_method_format_conflicts_resolved_by_reference_rules() -> None:
    # awq with a format it cannot produce -> format gemm
    cfg = parse_config({"quant_method": "awq", "format": "gptq", "bits": 4})
    assert (cfg.method, cfg.format) == (METHOD.AWQ, "gemm")
    # gptq method with an AWQ-only format -> the format decides the method
    cfg = parse_config({"quant_method": "gptq", "format": "gemv", "bits": 4})
    assert (cfg.method, cfg.format) == (METHOD.AWQ, "gemv")
    assert any("method fixed to 'awq'" in n for n in cfg.notes)
    # a marlin/bitblas method value is a layout hint
    cfg = parse_config({"quant_method": "marlin", "bits": 4})
    assert (cfg.method, cfg.format) == (METHOD.GPTQ, "marlin")
    # llm-awq backend tag forces method, format and int16 words
    cfg = parse_config({"quant_method": "awq", "version": "gemv_fast", "backend": "llm-awq", "bits": 4})
    assert (cfg.method, cfg.format, cfg.pack_dtype) == (METHOD.AWQ, "llm-awq", "int16")
    assert cfg.to_dict()["backend"] == "llm-awq"


@pytest.mark.parametrize("bits", [5, 6, 7])
@pytest.mark.parametrize("fmt", ["gptq", "gptq_v2"])
def test_five_six_seven_bit_gptq_routes_to_planar(bits: int, fmt: str) -> None:
    assert parse_config({"bits": bits, "format": fmt}).format == "gptq_p"
    cfg = QuantizeConfig(bits=4, format=fmt, dynamic={r"model\.layers\.0\.": {"bits": bits}})
    assert cfg.format == "gptq_p" and cfg.family is FORMAT.GPTQ_P


def test_negative_dynamic_bits_do_not_route() -> None:
    cfg = QuantizeConfig(bits=4, format="gptq", dynamic={"-:lm_head": {"bits": 5}})
    assert cfg.format == "gptq"


def test_unknown_fields_kept_reported_and_written() -> None:
    cfg = parse_config({"bits": 4, "tool_specific": {"a": 1}, "damp_percent": 0.01, "meta": {"mse": 2.0}})
    assert cfg.unknown == {"tool_specific": {"a": 1}}
    assert any("tool_specific" in n for n in cfg.notes)
    assert cfg.settings["damp_percent"] == 0.01 and cfg.settings["mse"] == 2.0
    out = cfg.to_dict()
    assert out["tool_specific"] == {"a": 1} and out["damp_percent"] == 0.01
    assert out["meta"]["mse"] == 2.0


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"bits": 9}, "bits"),
        ({"bits": 5, "format": "gemm"}, None),
        ({"bits": 4, "group_size": 0}, "group_size"),
        ({"bits": 4, "sym": "yes"}, "sym"),
        ({"bits": 4, "pack_dtype": "float32"}, "pack_dtype"),
        ({"bits": 4, "format": "nope"}, "format"),
        ({"bits": 4, "quant_method": "nope"}, "method"),
        ({"bits": 1, "format": "gptq_p"}, "bits"),
        ({"quant_method": "bitsandbytes", "bits": 4, "format": "int8"}, "format"),
        ({"quant_method": "fp8", "format": "nf4"}, "format"),
        ({"bits": 4, "meta": {"qformats_config_version": 99}}, "config_version"),
        ({"bits": 4, "dynamic": {"(": {}}}, "dynamic"),
        ([1, 2], "JSON object"),
    ],
)
def test_malformed_configs_named(raw: object, message: str | None) -> None:
    if message is None:  # a valid AWQ 5-bit config: AwqTorch handles 2..8
        assert parse_config(raw).bits == 5
        return
    with pytest.raises(QFormatsError, match=message):
        parse_config(raw, source="quantize_config.json")


def test_error_names_the_source() -> None:
    with pytest.raises(ValueError, match=r"^my/quantize_config\.json: bits"):
        parse_config({"bits": 11}, source="my/quantize_config.json")


def test_autoawq_quant_config_file_shape() -> None:
    cfg = parse_config({"zero_point": True, "q_group_size": 128, "w_bit": 4, "version": "GEMM"})
    assert (cfg.method, cfg.format, cfg.bits, cfg.group_size, cfg.sym) == (METHOD.AWQ, "gemm", 4, 128, False)


def test_transformers_gptq_config_keeps_its_extra_fields() -> None:
    raw = {
        "bits": 4, "group_size": 128, "damp_percent": 0.1, "desc_act": True, "sym": True, "use_exllama": True,
        "exllama_config": {"version": 1}, "quant_method": "gptq", "checkpoint_format": "gptq", "meta": None,
        "backend": None, "dataset": None,
    }  # fmt: skip
    cfg = parse_config(raw)
    assert (cfg.method, cfg.format, cfg.desc_act) == (METHOD.GPTQ, "gptq", True)
    out = cfg.to_dict()
    assert out["use_exllama"] is True and out["exllama_config"] == {"version": 1} and out["damp_percent"] == 0.1
    assert "dataset" not in out  # None values are dropped, as the reference writer does


def test_config_from_folded_lets_the_caller_choose_before_the_rules_run() -> None:
    from qformats.config import config_from_folded, fold_aliases, parse_config
    from qformats.enums import METHOD

    raw = {"wbits": 4, "method": "awq", "format": "gptq"}
    folded = fold_aliases(raw)
    assert (folded.fields["bits"], folded.fields["method"], folded.fields["format"]) == (4, "awq", "gptq")
    fixed = parse_config(raw)  # the resolver fixes the pair, with a note
    assert fixed.format == "gemm" and any("format fixed to 'gemm'" in n for n in fixed.notes)
    chosen = config_from_folded(folded, method="gptq")
    assert (chosen.method, chosen.format) == (METHOD.GPTQ, "gptq")
    assert config_from_folded(fold_aliases(raw)) == fixed
