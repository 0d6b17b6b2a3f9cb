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
