"""Every GGUF bits alias parses, round-trips through the written config, and names the stored ggml type."""

from __future__ import annotations

import pytest
from qformats.config import QuantizeConfig, parse_config
from qformats.config.resolve import gguf_bits
from qformats.enums import GGUF_BIT_ALIASES
from qformats.errors import ConfigError
from qformats.layouts.gguf.aliases import ALIAS_TO_TYPE, tensor_type


@pytest.mark.parametrize("alias", sorted(GGUF_BIT_ALIASES))
def test_every_alias_resolves_and_round_trips(alias: str) -> None:
    parsed = gguf_bits(alias)
    assert parsed is not None, f"{alias!r} is a GGUF bits alias but gguf_bits() rejects it"
    width, public = parsed
    assert width == int(alias[1])
    cfg = QuantizeConfig(bits=alias)
    assert (cfg.width, cfg.format, cfg.family.value) == (width, public, "gguf")
    written = cfg.to_dict()
    assert written["bits"] == alias
    assert parse_config(written) == cfg
    assert tensor_type(cfg.width, str(cfg.format)).name == ALIAS_TO_TYPE[alias]


def test_q1_0_g128_is_prism_q1_0_under_its_own_name() -> None:
    assert gguf_bits("q1_0_g128") == (1, "q_0_g128")
    assert gguf_bits("Q1_0-G128") == (1, "q_0_g128")
    cfg = parse_config({"bits": "q1_0_g128", "quant_method": "gguf"})
    assert tensor_type(cfg.width, str(cfg.format)).name == "Q1_0"
    assert parse_config({"bits": 1, "format": "q_0_g128"}) == cfg


def test_g128_exists_only_for_one_bit() -> None:
    assert gguf_bits("q4_0_g128") is None
    with pytest.raises(ConfigError, match=r"q_0_g128.*1-bit.*bits is 4"):
        parse_config({"bits": 4, "format": "q_0_g128"})
