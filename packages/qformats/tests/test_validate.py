"""validate(tensors, config): whole-checkpoint findings with full tensor keys and stable rule ids."""

from __future__ import annotations

import numpy as np
from qformats import QuantizeConfig, QuantizedWeight, get_layout, validate
from qformats.logical import default_g_idx


def module(out: int, in_: int, bits: int = 4, group_size: int = 32, fmt: str = "gptq_v2") -> dict[str, np.ndarray]:
    rng = np.random.default_rng(out * in_)
    groups = -(-in_ // group_size)
    weight = QuantizedWeight(
        rng.integers(0, 1 << bits, (out, in_), dtype=np.uint8),
        np.ones((groups, out), np.float16),
        np.full((groups, out), 1 << (bits - 1), np.int32),
        default_g_idx(in_, group_size),
        bits,
        group_size,
        True,
    )
    return get_layout(fmt).pack(weight)


def checkpoint(**modules: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {f"model.{name}.{key}": arr for name, tensors in modules.items() for key, arr in tensors.items()}


CFG = QuantizeConfig(bits=4, group_size=32, format="gptq_v2")


def test_clean_checkpoint_has_no_violation() -> None:
    tensors = checkpoint(q=module(32, 64), k=module(16, 96))
    tensors["model.norm.weight"] = np.ones(64, np.float32)
    assert validate(tensors, CFG) == []


def test_violations_carry_full_keys_and_rules() -> None:
    tensors = checkpoint(q=module(32, 64), k=module(16, 96))
    tensors["model.k.g_idx"] = np.full(96, 7, np.int32)
    tensors["model.q.qzeros"] = tensors["model.q.qzeros"].astype(np.int64)
    found = {(v.rule, v.tensor) for v in validate(tensors, CFG)}
    assert found == {("GPTQ-GIDX-RANGE", "model.k.g_idx"), ("GPTQ-DTYPE", "model.q.qzeros")}


def test_dynamic_overrides_and_exclusions_apply_per_module() -> None:
    cfg = QuantizeConfig(bits=4, group_size=32, format="gptq_v2", dynamic={r"model\.k": {"bits": 8}, "-:model.v": {}})
    tensors = checkpoint(q=module(32, 64), k=module(32, 64, bits=8), v=module(32, 64))
    found = [(v.rule, v.tensor) for v in validate(tensors, cfg)]
    assert found == [("CONFIG-EXCLUDED", "model.v.qweight")]
    # the 4-bit config applied to the 8-bit module k would be a shape violation
    assert ("GPTQ-SHAPE", "model.k.qweight") in [(v.rule, v.tensor) for v in validate(tensors, CFG)]


def test_group_count_mismatch_against_config() -> None:
    tensors = checkpoint(q=module(32, 64, group_size=16))
    found = [(v.rule, v.tensor, v.expected, v.found) for v in validate(tensors, CFG)]
    assert ("GPTQ-GROUPS", "model.q.scales", "2 groups", "4 groups") in found


def test_explicit_shapes_and_missing_modules() -> None:
    tensors = checkpoint(q=module(32, 64))
    found = validate(tensors, CFG, shapes={"model.q": (64, 48)})
    assert {v.rule for v in found} == {"GPTQ-SHAPE"}
    assert [v.rule for v in validate({"w": np.ones(3)}, CFG)] == ["CONFIG-NO-MODULES"]
    tensors["model.q.scales"] = np.ones(4, np.float16)
    assert [v.rule for v in validate(tensors, CFG)] == ["SHAPE-UNKNOWN"]


def test_families_outside_the_registry_are_validated_per_module() -> None:
    from qformats.config import parse_config
    from qformats.layouts.qqq import QQQWeight, pack_qqq
    from qformats.layouts.vptq import VPTQWeight, pack_vptq, spec_from_config

    rng = np.random.default_rng(0)
    qqq_weight = QQQWeight(rng.integers(0, 16, (64, 128)).astype(np.uint8), None, np.ones(64, np.float32), -1)
    packed = {f"model.layers.{i}.mlp.up_proj.{k}": v for i in (0, 1) for k, v in pack_qqq(qqq_weight).items()}
    qqq_cfg = parse_config({"bits": 4, "group_size": -1, "quant_method": "qqq", "format": "qqq"})
    assert validate(packed, qqq_cfg) == []
    broken = {**packed, "model.layers.1.mlp.up_proj.s_channel": np.ones((1, 64), np.float16)}
    assert [(v.rule, v.tensor) for v in validate(broken, qqq_cfg)] == [
        ("QQQ-DTYPE-S_CHANNEL", "model.layers.1.mlp.up_proj.s_channel")
    ]
    assert [v.rule for v in validate({"x.qweight": np.zeros(1)}, qqq_cfg)] == ["CONFIG-NO-MODULES"]

    fields = {"vector_lens": [-1, 4], "num_centroids": [-1, 16], "num_res_centroids": [-1, -1]}
    spec = spec_from_config(fields, 32, 8)
    books = rng.standard_normal((1, 16, 4)).astype(np.float16)
    weight = VPTQWeight(spec, books, rng.integers(0, 16, (1, 2, 32)).astype(np.int32))
    vptq_tensors = {f"m.proj.{k}": v for k, v in pack_vptq(weight).items()}
    vptq_cfg = parse_config({"bits": 2, "group_size": -1, "quant_method": "vptq", "format": "vptq", **fields})
    assert validate(vptq_tensors, vptq_cfg, shapes={"m.proj": (32, 8)}) == []
    assert [v.rule for v in validate(vptq_tensors, vptq_cfg)] == ["SHAPE-UNKNOWN"]
    missing = {k: v for k, v in vptq_tensors.items() if not k.endswith("centroids.weight")}
    assert [(v.rule, v.tensor) for v in validate(missing, vptq_cfg, shapes={"m.proj": (32, 8)})] == [
        ("VPTQ-MISSING", "m.proj.centroids.weight")
    ]
