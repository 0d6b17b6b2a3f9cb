"""FP8, bitsandbytes NF4/FP4/int8 and GGUF block types through the torch reference backend."""

import numpy as np
import pytest
import torch
from qformats.layouts.bnb import BnB4Weight, BnB8Weight, pack_bnb4, pack_bnb8
from qformats.layouts.fp8 import FP8Weight, pack_fp8
from qformats.layouts.gguf import GGUFWeight
from qkernels import (
    BackendRefusedError,
    KernelInputError,
    probe,
    repack,
    select,
    weight_only_linear,
)
from qkernels.testing.cases import TOLERANCE_EPS

OUT, IN = 32, 256


def dense() -> np.ndarray:
    return (np.random.default_rng(3).standard_normal((OUT, IN)) * 0.05).astype(np.float32)


def fp8_module_tensors() -> tuple[dict[str, np.ndarray], object, dict[str, object]]:
    w = FP8Weight.quantize(dense(), method="row")
    return (
        pack_fp8(w),
        w,
        {"format": "float8_e4m3fn", "weight_scale_method": "row", "weight_scale_semantics": "inverse"},
    )


def cases() -> list[tuple[str, dict[str, np.ndarray], object, dict[str, object], str | None]]:
    out = []
    tensors, w, config = fp8_module_tensors()
    out.append(("fp8", tensors, w, config, None))
    for quant_type in ("nf4", "fp4"):
        w4 = BnB4Weight.quantize(dense(), quant_type=quant_type, blocksize=64)
        out.append(("bitsandbytes", pack_bnb4(w4), w4, {}, None))
    w8 = BnB8Weight.quantize(dense())
    out.append(("bitsandbytes", pack_bnb8(w8), w8, {}, None))
    for qtype in ("Q4_K", "Q6_K", "Q8_0"):
        g = GGUFWeight.quantize(dense(), qtype)
        out.append(("gguf", {"qweight": g.qweight}, g, {}, qtype))
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("case", cases(), ids=lambda c: f"{c[0]}-{getattr(c[2], 'quant_type', c[4] or '')}")
def test_reference_serves_every_weight_only_family(case: tuple, dtype: torch.dtype) -> None:  # type: ignore[type-arg]
    family, tensors, logical, config, qtype = case
    bias = np.linspace(-1, 1, OUT).astype(np.float16)
    m = weight_only_linear(
        family, {**tensors, "bias": bias}, in_features=IN, out_features=OUT, config=config, qtype=qtype, dtype=dtype
    )
    assert m.NAME == "torch"
    w = torch.from_numpy(logical.dequantize()).double()  # type: ignore[attr-defined]
    for batch in (1, 32):
        x = torch.randn(batch, IN, generator=torch.Generator().manual_seed(batch)).to(dtype)
        ref = x.double() @ w.T + torch.from_numpy(bias.astype(np.float64))
        tol = 4 * TOLERANCE_EPS[dtype] * (x.double().abs() @ w.abs().T + ref.abs() + 1)
        y = m(x)
        assert y.dtype == dtype and bool(((y.double() - ref).abs() <= tol).all())
    saved = m.checkpoint_tensors()
    assert sorted(saved) == sorted([*tensors, "bias"])
    again = repack(m, "torch", dtype=dtype, cache_dense=True).checkpoint_tensors()
    for name, arr in tensors.items():
        assert saved[name].dtype == arr.dtype and np.array_equal(saved[name], arr)
        assert np.array_equal(again[name], arr)


def test_fast_backends_refuse_codebook_weights_with_the_reason() -> None:
    tensors, _, config = fp8_module_tensors()
    m = weight_only_linear("fp8", tensors, in_features=IN, out_features=OUT, config=config)
    reasons = probe(m.contract, "cpu", torch.bfloat16)
    assert all("logical weight kind 'fp8'" in r[0] for name, r in reasons.items() if name != "torch")
    with pytest.raises(BackendRefusedError, match="logical weight kind 'fp8'"):
        select(m.contract, "cpu", torch.bfloat16, backend="cpu_int4")


def test_gguf_k_types_are_not_mistaken_for_the_int4_kernels() -> None:
    g = GGUFWeight.quantize(dense(), "Q4_K")
    m = weight_only_linear("gguf", {"qweight": g.qweight}, in_features=IN, out_features=OUT, qtype="Q4_K")
    assert m.contract.bits == 4 and m.contract.group_size == 256
    rejected = {c.name: c.reasons for c in m.selection.rejected}
    assert "logical weight kind 'gguf_blocks' not in {integer}" in rejected["cpu_int4"]


def test_weight_only_errors_name_what_is_wrong() -> None:
    tensors, _, config = fp8_module_tensors()
    with pytest.raises(KernelInputError, match=r"expected a \[16, 256\] weight, found \[32, 256\]"):
        weight_only_linear("fp8", tensors, in_features=IN, out_features=16, config=config)
    with pytest.raises(KernelInputError, match="qtype="):
        weight_only_linear("gguf", {"qweight": np.zeros((OUT, 10), np.uint8)}, in_features=IN, out_features=OUT)
    with pytest.raises(KernelInputError, match="family 'nf4'"):
        weight_only_linear("nf4", tensors, in_features=IN, out_features=OUT)


@pytest.mark.parametrize("group_size", [-1, 64])
def test_reference_serves_qqq_modules(group_size: int) -> None:
    from qformats.layouts.qqq import QQQWeight, pack_qqq

    out, in_ = 64, 128
    rng = np.random.default_rng(group_size + 2)
    s_group = None if group_size == -1 else rng.integers(1, 17, (in_ // group_size, out)).astype(np.float16)
    w = QQQWeight(rng.integers(0, 16, (out, in_)).astype(np.uint8), s_group, np.full(out, 1e-3, np.float32), group_size)
    tensors = pack_qqq(w)
    m = weight_only_linear("qqq", tensors, in_features=in_, out_features=out, config={"group_size": group_size})
    assert m.NAME == "torch" and m.contract.logical_kind == "qqq"
    assert torch.equal(m.dense_weight(), torch.from_numpy(w.dequantize()))
    x = torch.randn(3, in_, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(m(x), x @ torch.from_numpy(w.dequantize()).T, rtol=1e-5, atol=1e-6)
    assert all(np.array_equal(m.checkpoint_tensors()[k], v) for k, v in tensors.items())
    with pytest.raises(KernelInputError, match="group_size must be an integer"):
        weight_only_linear("qqq", tensors, in_features=in_, out_features=out, config={"group_size": "128"})


def test_reference_serves_paroquant_modules_as_their_dense_equivalent() -> None:
    from qformats.layouts.paroquant import ParoQuantWeight, pack_paroquant
    from qformats.logical import QuantizedWeight, default_g_idx

    out, in_, gs = 64, 128, 32
    rng = np.random.default_rng(7)
    awq = QuantizedWeight(
        rng.integers(0, 16, (out, in_)).astype(np.uint8),
        (rng.random((in_ // gs, out)) * 0.01 + 1e-3).astype(np.float16),
        rng.integers(0, 16, (in_ // gs, out)).astype(np.int32),
        default_g_idx(in_, gs),
        4,
        gs,
        False,
    )
    pairs = np.stack([np.concatenate([rng.permutation(gs) for _ in range(in_ // gs)]) for _ in range(2)])
    theta = (rng.random((2, in_ // 2)) - 0.5).astype(np.float16)
    w = ParoQuantWeight(awq, pairs.astype(np.int16), theta, (rng.random((1, in_)) + 0.5).astype(np.float16))
    tensors = pack_paroquant(w)
    m = weight_only_linear("paroquant", tensors, in_features=in_, out_features=out, config={"group_size": gs})
    assert m.NAME == "torch" and m.contract.logical_kind == "paroquant"
    x = rng.standard_normal((3, in_))
    expected = w.rotate_inputs(x) @ awq.dequantize().astype(np.float64).T  # rotate, then the AWQ layer
    assert np.allclose(m(torch.from_numpy(x).float()).double().numpy(), expected, rtol=1e-4, atol=1e-5)
    assert all(np.array_equal(m.checkpoint_tensors()[k], v) for k, v in tensors.items())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_reference_serves_vptq_modules(dtype: torch.dtype) -> None:
    from qformats.layouts.vptq import VPTQWeight, pack_vptq, spec_from_config

    config = {"bits": 2, "vector_lens": [-1, 4], "num_centroids": [-1, 16], "num_res_centroids": [-1, 4]}
    spec = spec_from_config(config, 48, 20)
    rng = np.random.default_rng(0)
    _, gs, g = spec.groups
    w = VPTQWeight(
        spec,
        centroids=rng.standard_normal((g, 16, 4)).astype(np.float32),
        indices=rng.integers(0, 16, (g, spec.num_indices, gs)).astype(np.int32),
        res_centroids=(rng.standard_normal((g, 4, 4)) * 0.1).astype(np.float32),
        res_indices=rng.integers(0, 4, (g, spec.num_indices, gs)).astype(np.int32),
        compute_dtype="bfloat16" if dtype == torch.bfloat16 else "float16",
    )
    tensors = {k: torch.from_numpy(v) for k, v in pack_vptq(w).items()}
    for name in ("centroids.weight", "res_centroids.weight"):
        tensors[name] = tensors[name].to(dtype)
    m = weight_only_linear("vptq", tensors, in_features=48, out_features=20, config=config)
    assert m.NAME == "torch" and m.contract.logical_kind == "vptq"
    books = {k: (v.float() if v.dtype == torch.bfloat16 else v).numpy() for k, v in tensors.items()}
    expected = VPTQWeight(
        spec,
        centroids=books["centroids.weight"].reshape(g, 16, 4),
        indices=w.indices,
        res_centroids=books["res_centroids.weight"].reshape(g, 4, 4),
        res_indices=w.res_indices,
        compute_dtype=str(dtype).removeprefix("torch."),
    ).dequantize()
    assert torch.equal(m.dense_weight(), torch.from_numpy(expected))


def test_reference_serves_exl3_modules() -> None:
    from qformats.layouts.exl3 import EXL3Weight, pack_exl3

    rng = np.random.default_rng(3)
    scales = np.ones(128, np.float16), np.ones(256, np.float16)
    w = EXL3Weight(rng.integers(0, 8, (8, 16, 256)).astype(np.uint8), 3, "mcg", *scales)
    tensors = pack_exl3(w)
    m = weight_only_linear("exl3", tensors, in_features=128, out_features=256)
    assert m.NAME == "torch" and m.contract.logical_kind == "exl3" and m.contract.bits == 3
    assert torch.equal(m.dense_weight(), torch.from_numpy(w.dequantize()))
    assert sorted(m.checkpoint_tensors()) == sorted(tensors)
