"""The one method -> formats table lowbit's quantizers write (qhf, qlooper and the CLI read it)."""

from __future__ import annotations

import pytest
from qformats.config import DEFAULT_FORMATS, QUANTIZER_FORMATS, SOLVER_VARIANTS, WEIGHT_ONLY_METHODS, default_format
from qformats.enums import format_subtype_family, parse_format
from qformats.errors import ConfigError


def test_every_default_is_one_of_its_methods_formats() -> None:
    for method, fmt in DEFAULT_FORMATS.items():
        assert fmt in QUANTIZER_FORMATS[method], method


def test_every_written_format_is_a_qformats_family_or_subtype() -> None:
    for method, formats in QUANTIZER_FORMATS.items():
        for fmt in formats:
            if method in WEIGHT_ONLY_METHODS:
                assert format_subtype_family(fmt) is not None, (method, fmt)
            else:
                assert parse_format(fmt).value == fmt, (method, fmt)


def test_solver_variants_write_their_base_methods_default() -> None:
    assert default_format("gptaq") == default_format("foem") == "gptq"
    assert set(SOLVER_VARIANTS.values()) <= set(DEFAULT_FORMATS)
    assert default_format("awq") == "gemm"
    assert default_format("rtn") == "gptq"


def test_a_method_without_a_fixed_default_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="method: no default format for 'gguf'"):
        default_format("gguf")
    with pytest.raises(ConfigError, match="'exl3'"):
        default_format("exl3")


def test_the_table_is_read_only() -> None:
    with pytest.raises(TypeError):
        QUANTIZER_FORMATS["gptq"] = ("marlin",)  # type: ignore[index]
