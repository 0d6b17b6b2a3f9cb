"""The qalgos specs of a run come from its ``QuantizeConfig`` alone: the run's spec, and per-module specs from
``QuantizeConfig.for_module`` (GGUF ``dynamic`` types, integer methods' ``bits`` / ``group_size`` rules)."""

from __future__ import annotations

import warnings
from dataclasses import replace

import pytest
from qalgos.paroquant import ParoSpec
from qalgos.spec import QuantSpec
from qalgos.weight_only import WeightOnlySpec
from qhf.quant_config import read_quantize_config
from qhf.spec_from_config import module_specs, quant_spec


def test_calibrated_spec_takes_the_resolved_settings() -> None:
    spec = quant_spec(read_quantize_config({"method": "gptq", "bits": 3, "group_size": 32, "damp_percent": 0.02}))
    assert isinstance(spec, QuantSpec)
    assert (spec.bits, spec.group_size, spec.damp_percent, spec.act_group_aware) == (3, 32, 0.02, True)
    assert spec.scale_dtype == "float16"
    qqq = quant_spec(read_quantize_config({"method": "qqq"}))
    assert (qqq.damp_percent, qqq.damp_auto_increment, qqq.scale_dtype) == (0.005, 0.001, "float32")
    assert quant_spec(read_quantize_config({"method": "gptq", "gptaq": {}})).act_group_aware is False


def test_paroquant_and_weight_only_specs() -> None:
    paro = quant_spec(read_quantize_config({"method": "paroquant", "group_size": 64, "krot": 2}))
    assert isinstance(paro, ParoSpec) and (paro.group_size, paro.krot) == (64, 2)
    fp8 = quant_spec(read_quantize_config({"method": "fp8", "weight_block_size": [32, 64]}))
    assert isinstance(fp8, WeightOnlySpec) and fp8.family == "fp8" and fp8.block_size == (32, 64)
    nf4 = quant_spec(read_quantize_config({"method": "bitsandbytes", "format": "nf4", "block_size": 128}))
    assert (nf4.family, nf4.quant_type, nf4.block_size) == ("bnb4", "nf4", 128)


def test_per_module_specs_follow_the_config_dynamic_rules() -> None:
    cfg = read_quantize_config(
        {
            "method": "gguf",
            "bits": 4,
            "format": "q_0",
            "dynamic": {r"+:.*\.1\.mlp\.down_proj$": {"bits": 8, "format": "q_0"}},
        }
    )
    names = ["model.layers.0.mlp.down_proj", "model.layers.1.mlp.down_proj", "model.layers.1.self_attn.q_proj"]
    specs = module_specs(cfg, names)
    assert list(specs) == ["model.layers.1.mlp.down_proj"] and specs["model.layers.1.mlp.down_proj"].gguf_type == "Q8_0"
    assert quant_spec(cfg).gguf_type == "Q4_0"
    plain = read_quantize_config({"method": "gptq", "dynamic": {r"+:.*down_proj$": {"bits": 8}}})
    integer = module_specs(plain, names)  # an integer method's modules take a rule's bits / group_size too
    assert list(integer) == names[:2] and all(s.bits == 8 and s.group_size == 128 for s in integer.values())
    assert integer[names[0]] == replace(quant_spec(plain), bits=8)
    paro = read_quantize_config({"method": "paroquant", "group_size": 64, "dynamic": {r"+:.*down_proj$": {"bits": 8}}})
    assert module_specs(paro, names) == {}


def test_the_deprecated_settings_name_warns_and_gives_the_config(tiny_dirs) -> None:
    import qhf

    qm = qhf.load(tiny_dirs("llama"), {"method": "rtn", "group_size": 32})
    with pytest.warns(DeprecationWarning, match="QuantModel.settings"):
        assert qm.settings is qm.config
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert qm.config.group_size == 32
