"""Presets by width: ``best`` at 2 bits is its own recipe (asymmetric, ``gptq_v2``), at 3 and 4 bits the earlier one
(docs/algorithms.md, "Quality at 4, 3 and 2 bits"); the user's keys win at every width. With a target engine that
loads LoRA adapters ``best`` adds EoRA; without one (or for llama.cpp) it is unchanged."""

from __future__ import annotations

import pytest
from qformats.engines import EngineTargetError
from qhf.methods import get_method
from qhf.methods.cli_flags import rewritten
from qhf.presets import BEST_ADAPTER_RANK, apply_preset, preset_settings, target_settings
from qhf.quant_config import QuantConfigError, read_quantize_config

BEST_3_4 = {"method": "gptq", "desc_act": True, "mse": 2.0, "rotation": "hadamard"}
BEST_2 = {**BEST_3_4, "sym": False, "format": "gptq_v2"}


@pytest.mark.parametrize("bits", [3, 4, 8])
def test_best_keeps_its_recipe_at_three_bits_and_wider(bits: int) -> None:
    assert preset_settings("best", bits) == BEST_3_4
    assert apply_preset("best", {"bits": bits, "group_size": 128}) == {**BEST_3_4, "bits": bits, "group_size": 128}


def test_best_at_two_bits_is_asymmetric_in_the_true_zero_layout() -> None:
    assert preset_settings("best", 2) == BEST_2
    assert apply_preset("best", {"bits": 2, "group_size": 32}) == {**BEST_2, "bits": 2, "group_size": 32}


def test_a_config_without_bits_gets_the_four_bit_recipe_and_its_keys_win() -> None:
    assert apply_preset("best") == BEST_3_4
    mine = apply_preset("best", {"bits": 2, "sym": True, "format": "gptq", "mse": 0.0})
    assert (mine["sym"], mine["format"], mine["mse"], mine["rotation"]) == (True, "gptq", 0.0, "hadamard")


def test_reference_is_gptqs_defaults_at_every_width() -> None:
    for bits in (2, 3, 4):
        assert apply_preset("reference", {"bits": bits}) == {"method": "gptq", "bits": bits}


def test_an_unknown_preset_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(QuantConfigError, match=r"preset: expected one of best, reference, found 'fast'"):
        preset_settings("fast", 2)


def test_the_clis_symmetric_default_gives_way_to_the_two_bit_recipe() -> None:
    flags = get_method("gptq").cli_flags
    cli = {"method": "gptq", "bits": 2, "group_size": 32, "sym": True}  # what no --asym gives
    read = read_quantize_config(rewritten(flags, {"preset": "best"}, dict(cli)))
    assert (read.sym, read.format, read.desc_act, read.group_size) == (False, "gptq_v2", True, 32)
    four = rewritten(flags, {"preset": "best"}, {**cli, "bits": 4})
    assert four == {**BEST_3_4, "bits": 4, "group_size": 32, "sym": True}


@pytest.mark.parametrize("target", ["vllm", "vllm:gptq", "transformers+gptqmodel", "transformers+gptqmodel:torch"])
def test_best_for_a_target_that_loads_lora_adds_the_eora_adapter(target: str) -> None:
    assert target_settings("best", target) == {"adapter": {"rank": BEST_ADAPTER_RANK}}
    for bits, recipe in ((4, BEST_3_4), (2, BEST_2)):
        config = apply_preset("best", {"bits": bits, "group_size": 32}, target=target)
        assert config == {**recipe, "adapter": {"rank": 32}, "bits": bits, "group_size": 32}
        assert read_quantize_config(config).settings["adapter"] == {"name": "lora", "path": "eora", "rank": 32}


@pytest.mark.parametrize("target", [None, "llama.cpp", "llama.cpp:gguf"])
def test_best_without_a_lora_loading_target_stays_as_it_was(target: str | None) -> None:
    assert target_settings("best", target) == {}
    assert apply_preset("best", {"bits": 4}, target=target) == {**BEST_3_4, "bits": 4}
    assert apply_preset("best", {"bits": 2}, target=target) == {**BEST_2, "bits": 2}


def test_the_users_adapter_wins_and_reference_adds_none() -> None:
    assert apply_preset("best", {"adapter": {"rank": 8}}, target="vllm")["adapter"] == {"rank": 8}
    off = apply_preset("best", {"adapter": None}, target="vllm")
    assert off["adapter"] is None and read_quantize_config(off).settings["adapter"] is None
    assert apply_preset("reference", {"bits": 4}, target="vllm") == {"method": "gptq", "bits": 4}


def test_an_unknown_target_is_refused_naming_the_engines() -> None:
    with pytest.raises(EngineTargetError, match=r"'tgi'.*engines: vllm"):
        target_settings("best", "tgi")
