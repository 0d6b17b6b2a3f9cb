"""Each engine load rule, alone: it holds on a checkpoint that meets it and names the failure on one that does not."""

from __future__ import annotations

import pytest
from qformats.engines import CheckpointFacts, LinearShape
from qformats.engines.facts import GGUF
from qformats.engines.rules import (
    BitsIn,
    DtypeIn,
    FormatIn,
    GGUFFileOnly,
    GroupSizeIn,
    InDivisible,
    InDivisibleByGroup,
    OutDivisible,
    OutDivisibleByPackFactor,
    SymOnly,
)

# SmolLM2-135M's decoder linears: hidden 576, intermediate 1536
SMOLLM2 = (
    LinearShape("model.layers.0.self_attn.q_proj", 576, 576),
    LinearShape("model.layers.0.self_attn.k_proj", 576, 192),
    LinearShape("model.layers.0.mlp.up_proj", 576, 1536),
    LinearShape("model.layers.0.mlp.down_proj", 1536, 576),
)
BASE = CheckpointFacts("gptq", 4, 64, True, False, "float16", SMOLLM2)


def test_format_in() -> None:
    assert FormatIn(("gptq", "gptq_v2")).check(BASE) is None
    assert FormatIn(("gemm",)).check(BASE) == "format 'gptq' is not read by this kernel (it reads gemm)"


def test_bits_in() -> None:
    assert BitsIn((4, 8)).check(BASE) is None
    assert BitsIn((4, 8)).check(BASE.changed(bits=3)) == "bits 3 not in {4, 8}"


def test_group_size_in() -> None:
    rule = GroupSizeIn((-1, 32, 64, 128))
    assert rule.check(BASE) is None and rule.check(BASE.changed(group_size=-1)) is None
    assert rule.check(BASE.changed(group_size=256)) == "group_size 256 not in {-1, 32, 64, 128}"
    one = BASE.changed(group_size=576, modules=SMOLLM2[:3])  # one group spanning all of K
    assert GroupSizeIn((32,), full_k=True).check(one) is None
    assert GroupSizeIn((32,)).check(one) is not None


def test_sym_only() -> None:
    assert SymOnly().check(BASE) is None
    assert "asymmetric" in SymOnly().check(BASE.changed(sym=False))


def test_in_divisible_names_the_first_module_and_counts_the_rest() -> None:
    assert InDivisible(64).check(BASE) is None
    assert InDivisible(128).check(BASE) == (
        "model.layers.0.self_attn.q_proj: K=576 not divisible by 128 (and 2 more of 4 modules)"
    )


def test_out_divisible() -> None:
    assert OutDivisible(64).check(BASE) is None
    assert OutDivisible(128).check(BASE) == (
        "model.layers.0.self_attn.q_proj: N=576 not divisible by 128 (and 2 more of 4 modules)"
    )


def test_out_divisible_by_pack_factor() -> None:
    assert OutDivisibleByPackFactor().check(BASE) is None  # 4 bits: 8 codes per word
    odd = BASE.changed(bits=3, modules=(LinearShape("m", 576, 48),))
    assert OutDivisibleByPackFactor().check(odd) == "m: N=48 not divisible by 32"  # 32/3: numerator 32


def test_a_module_s_own_width_is_checked() -> None:
    """A mixed-precision checkpoint: the config's bits pass, a module's dynamic width is named when it fails."""
    mixed = BASE.changed(
        modules=(
            LinearShape("model.layers.0.self_attn.q_proj", 576, 576),
            LinearShape("model.layers.0.mlp.down_proj", 1536, 48, bits=3),
            LinearShape("model.layers.1.mlp.down_proj", 1536, 576, bits=8),
        )
    )
    assert mixed.widths() == (3, 4, 8) and mixed.module_bits(mixed.modules[0]) == 4
    assert BitsIn((4, 8)).check(mixed) == "model.layers.0.mlp.down_proj: 3-bit (a dynamic rule) not in {4, 8}"
    assert BitsIn((2, 3, 4, 8)).check(mixed) is None
    assert OutDivisibleByPackFactor().check(mixed) == "model.layers.0.mlp.down_proj: N=48 not divisible by 32"


@pytest.mark.parametrize(("group", "fails"), [(64, False), (-1, False), (128, True), (32, False), (96, False)])
def test_in_divisible_by_group(group: int, fails: bool) -> None:
    reason = InDivisibleByGroup().check(BASE.changed(group_size=group))
    assert (reason is not None) is fails
    if fails:
        assert (
            reason == "model.layers.0.self_attn.q_proj: K=576 not divisible by group_size 128 (and 2 more of 4 modules)"
        )


def test_in_divisible_by_group_larger_than_k() -> None:
    small = BASE.changed(group_size=128, modules=(LinearShape("m", 64, 128),))
    assert InDivisibleByGroup().check(small) == "m: K=64 not divisible by group_size 128"  # vLLM gptq: K % g
    assert InDivisibleByGroup(below_k_only=True).check(small) is None  # Marlin: only when group_size < K


def test_dtype_in_is_not_blocking() -> None:
    rule = DtypeIn(("float16",))
    assert rule.check(BASE) is None and rule.blocking is False
    assert "config dtype float32 is not among" in rule.check(BASE.changed(dtype="float32"))
    assert "unstated" in rule.check(BASE.changed(dtype=None))


def test_gguf_file_only() -> None:
    assert GGUFFileOnly().check(BASE.changed(container=GGUF)) is None
    assert "reads .gguf files only" in GGUFFileOnly().check(BASE)
