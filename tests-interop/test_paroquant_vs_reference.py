"""ParoQuant: the reference's module tensors read by lowbit, the AWQ part dequantized identically, the input
transform computed identically (float16 bit for bit), the layer's output matched, the bytes rewritten exactly."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from cases import as_dtype
from peer_paroquant import module_tensors, reference_awq_dense, reference_paro_module
from qformats.layouts.paroquant import identity_rotation, infer_meta, pack_paroquant, unpack_paroquant

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages/qformats/tests"))
from test_paroquant_layout import ROTATION_GOLDEN, rotation_case

SHAPES = [(256, 128, 64, 3), (128, 64, -1, 8), (256, 64, 128, 2)]


@pytest.mark.parametrize(("k", "n", "gs", "krot"), SHAPES)
def test_lowbit_reads_reference_paroquant_module(k: int, n: int, gs: int, krot: int) -> None:
    from gptqmodel.utils.paroquant import apply_paroquant_rotation_reference

    module = reference_paro_module(k, n, gs, krot, seed=k + n + krot)
    tensors = module_tensors(module)
    ours = unpack_paroquant(tensors, infer_meta(tensors, group_size=gs))
    theirs = reference_awq_dense(module)
    assert torch.equal(as_dtype(ours.weight.dequantize(), theirs.dtype), theirs)
    again = pack_paroquant(ours)
    for name, value in tensors.items():
        assert again[name].dtype == value.dtype and np.array_equal(again[name].view(np.uint8), value.view(np.uint8))

    x = torch.randn(4, k, generator=torch.Generator().manual_seed(1))
    group = k if gs == -1 else gs
    half = x.half()
    rotated = apply_paroquant_rotation_reference(
        half, module.pairs, module.theta, scales=module.channel_scales, group_size=group
    )
    assert np.array_equal(ours.rotate_inputs(half.numpy()).view(np.int16), rotated.numpy().view(np.int16))
    rotated32 = apply_paroquant_rotation_reference(
        x, module.pairs, module.theta, scales=module.channel_scales, group_size=group
    ).numpy()
    assert np.allclose(ours.rotate_inputs(x.numpy()), rotated32, rtol=1e-5, atol=1e-5)  # cos/sin ulps differ

    with torch.no_grad():
        y = module(x).double().numpy()  # CPU float32 path: rotate, then dequantized AWQ matmul
    mine = x.double().numpy() @ ours.dequantize().astype(np.float64).T
    assert np.abs(mine - y).max() <= 1e-3 * np.abs(y).max()  # the reference's weight is float16-rounded


def test_identity_buffers_are_the_reference_defaults() -> None:
    from gptqmodel.utils.paroquant import build_identity_rotation_buffers

    for k, gs, krot in [(256, 64, 8), (128, -1, 2)]:
        pairs, theta, scales = build_identity_rotation_buffers(in_features=k, group_size=gs, krot=krot)
        for theirs, mine in zip((pairs, theta, scales), identity_rotation(k, gs, krot), strict=True):
            assert theirs.numpy().dtype == mine.dtype and np.array_equal(theirs.numpy(), mine)


def test_rotation_golden_comes_from_the_reference() -> None:
    from gptqmodel.utils.paroquant import apply_paroquant_rotation_reference

    pairs, theta, scales, x = (torch.from_numpy(a) for a in rotation_case())
    y = apply_paroquant_rotation_reference(x, pairs, theta, scales=scales, group_size=4)
    assert y.view(torch.int16).tolist() == ROTATION_GOLDEN


def test_reference_loads_lowbit_quantized_paroquant(tmp_path: Path, tiny_source: Path) -> None:
    """A tiny llama quantized by lowbit's ParoQuant (learned rotations) loads in GPT-QModel as ``ParoLinear``
    modules; its float16 logits match lowbit's float32 reload within 1% of their scale (cosine > 0.9999)."""
    import json

    import qhf
    from cases import assert_logits_close
    from gptqmodel.nn_modules.qlinear.paroquant import ParoLinear
    from gptqmodel.utils.backend import BACKEND
    from lowbit_side import lowbit_logits
    from reference import reference_logits

    out = tmp_path / "lowbit-paroquant"
    budget = {"krot": 4, "opt_rotation_epochs": 2, "opt_finetune_epochs": 1, "opt_train_samples": 128}
    qm = qhf.load(tiny_source, {"method": "paroquant", "bits": 4, "group_size": 32, **budget})
    qm.quantize(samples=4, length=48)
    qm.save(out)
    assert json.loads((out / "quantize_config.json").read_text())["krot"] == 4
    assert not any(result.weight.is_identity() for result in qm.results.values())

    from gptqmodel import GPTQModel

    ref = GPTQModel.load(str(out), backend=BACKEND.PAROQUANT_CUDA, device="cpu", dtype=torch.float16)
    assert ref.quantize_config.krot == 4
    modules = {name: m for name, m in ref.model.named_modules() if isinstance(m, ParoLinear)}
    assert sorted(modules) == sorted(qm.results) and len(modules) == 14
    assert_logits_close(lowbit_logits(out), reference_logits(ref))
