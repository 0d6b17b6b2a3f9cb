"""FORMAT / METHOD values and the subtype family resolver."""

from __future__ import annotations

import pytest
from qformats.enums import FORMAT, METHOD, parse_format, parse_method, resolve_format_family
from qformats.errors import ConfigError, QFormatsError


def test_format_values_are_the_serialized_names() -> None:
    expected = {
        "gptq", "gptq_v2", "gptq_p", "gguf", "fp8", "bitsandbytes", "marlin", "bitblas", "qqq",
        "exl3", "vptq", "gemm", "gemv", "gemv_fast", "llm-awq", "paroquant",
    }  # fmt: skip
    assert {f.value for f in FORMAT} == expected
    assert FORMAT.LLM_AWQ == "llm-awq" and str(FORMAT.GPTQ_P) == "gptq_p"


def test_method_values() -> None:
    assert {m.value for m in METHOD} == {
        "gptq", "awq", "qqq", "gguf", "fp8", "bitsandbytes", "exl3", "paroquant", "vptq",
    }  # fmt: skip
    assert METHOD.PARO.value == "paroquant"


@pytest.mark.parametrize(
    ("fmt", "method", "family"),
    [
        ("nf4", None, FORMAT.BITSANDBYTES),
        ("fp4", "bitsandbytes", FORMAT.BITSANDBYTES),
        ("q4_k_m", None, FORMAT.GGUF),
        ("q_k_m", None, FORMAT.GGUF),
        ("Q4_0", None, FORMAT.GGUF),
        ("float8_e4m3fn", None, FORMAT.FP8),
        ("float8_e5m2", "fp8", FORMAT.FP8),
        ("gptq_v2", "gptq", FORMAT.GPTQ_V2),
        ("GEMM", "awq", FORMAT.GEMM),
        (None, None, FORMAT.GPTQ),
        ("anything", "gguf", FORMAT.GGUF),
    ],
)
def test_family_resolver(fmt: str | None, method: str | None, family: FORMAT) -> None:
    assert resolve_format_family(fmt, method) is family


def test_subtype_is_not_a_format_value() -> None:
    with pytest.raises(ConfigError, match="subtype"):
        parse_format("nf4")
    with pytest.raises(ValueError, match="format"):
        resolve_format_family("q9_z")


def test_unknown_method_is_named() -> None:
    with pytest.raises(QFormatsError, match=r"method.*'smoothquant'"):
        parse_method("smoothquant")
    assert parse_method("GPTQ") is METHOD.GPTQ
