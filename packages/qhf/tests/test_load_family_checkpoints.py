"""QQQ, ParoQuant, VPTQ and EXL3 checkpoint directories load with qkernels weight-only modules and run on CPU.

Each decoder projection of a tiny llama (hidden 128, so every family's shape rules hold) is replaced by a
random module packed with the family's own pack function; the loaded model's layers must hold exactly the
family's dense weight and compute ``x @ W.T + b``, and the whole model must run a forward pass.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import qhf
import torch
from qformats.checkpoint import write_checkpoint
from qformats.layouts.exl3 import EXL3Weight, pack_exl3
from qformats.layouts.paroquant import ParoQuantWeight, identity_rotation, pack_paroquant
from qformats.layouts.qqq import QQQWeight, pack_qqq
from qformats.layouts.vptq import VPTQWeight, pack_vptq, spec_from_config
from qformats.logical import QuantizedWeight, default_g_idx
from qhf.checkpoint_reader import open_quantized_checkpoint
from safetensors.numpy import load_file
from tiny_models import save_tiny_model

WIDE = {"hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 4, "num_key_value_heads": 4}
VPTQ_FIELDS = {"vector_lens": [-1, 4], "num_centroids": [-1, 16], "num_res_centroids": [-1, -1], "group_num": 1}
CONFIGS: dict[str, dict[str, object]] = {
    "qqq": {"bits": 4, "group_size": -1, "sym": True, "wbits": 4},
    "paroquant": {"bits": 4, "group_size": 32, "zero_point": False, "krot": 2},
    "vptq": {"bits": 2, "group_size": -1, **VPTQ_FIELDS},
    "exl3": {"bits": 3.0, "group_size": -1, "codebook": "mul1"},
}


def _pack(family: str, rng: np.random.Generator, out: int, in_: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """One random module of ``family``: its tensors and its dense float32 ``[out, in]`` weight."""
    if family == "qqq":
        codes = rng.integers(1, 16, (out, in_)).astype(np.uint8)
        w = QQQWeight(codes, None, (rng.random(out) * 0.01).astype(np.float32))
        return pack_qqq(w), w.dequantize()
    if family == "paroquant":
        groups = in_ // 32
        scalar = QuantizedWeight(
            rng.integers(0, 16, (out, in_)).astype(np.uint8), (rng.random((groups, out)) * 0.02).astype(np.float16),
            rng.integers(0, 16, (groups, out)).astype(np.int32), default_g_idx(in_, 32), 4, 32, False,
        )  # fmt: skip
        pairs, theta, scales = identity_rotation(in_, 32, 2)
        theta = ((rng.random(theta.shape) - 0.5) * 2).astype(theta.dtype)  # a real rotation
        paro = ParoQuantWeight(scalar, pairs, theta, scales)
        return pack_paroquant(paro), paro.dequantize()
    if family == "vptq":
        spec = spec_from_config(CONFIGS["vptq"], in_, out)
        _, gs, groups = spec.groups
        books = (rng.standard_normal((groups, 16, 4)) * 0.05).astype(np.float16)
        vptq = VPTQWeight(spec, books, rng.integers(0, 16, (groups, spec.num_indices, gs)).astype(np.int32))
        return pack_vptq(vptq), vptq.dequantize().astype(np.float32)
    symbols = rng.integers(0, 8, (in_ // 16, out // 16, 256)).astype(np.uint8)
    exl3 = EXL3Weight(symbols, 3, "mul1", (rng.random(in_) * 0.1).astype(np.float16), np.ones(out, np.float16))
    return pack_exl3(exl3), exl3.dequantize().astype(np.float32)


def _write(src: Path, out: Path, family: str) -> dict[str, np.ndarray]:
    """``src``'s dense model with every decoder projection stored as ``family``; returns the dense weights."""
    rng = np.random.default_rng(7)
    tensors: dict[str, np.ndarray] = {}
    dense: dict[str, np.ndarray] = {}
    for name, value in load_file(str(src / "model.safetensors")).items():
        if ".layers." in name and name.endswith("proj.weight"):
            module = name[: -len(".weight")]
            packed, dense[module] = _pack(family, rng, *value.shape)
            tensors.update({f"{module}.{k}": v for k, v in packed.items()})
        else:
            tensors[name] = value
    config = {**CONFIGS[family], "method": family, "quant_method": family, "format": family}
    model_config = json.loads((src / "config.json").read_text())
    write_checkpoint(out, tensors, quantize_config=config, model_config=model_config)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (src / name).is_file():
            shutil.copy(src / name, out / name)
    return dense


@pytest.fixture(scope="module")
def wide_llama(tmp_path_factory: pytest.TempPathFactory, tokenizer: object) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("wide"), "llama", tokenizer=tokenizer, **WIDE)


@pytest.mark.parametrize("family", ["qqq", "paroquant", "vptq", "exl3"])
def test_family_checkpoint_loads_and_runs_on_cpu(tmp_path: Path, wide_llama: Path, family: str) -> None:
    dense = _write(wide_llama, tmp_path / family, family)
    lm = qhf.load_quantized(tmp_path / family)
    assert len(lm.backends) == len(dense) == 14 and lm.config.format == family
    x = torch.randn(3, 128, dtype=torch.float32)
    for module, weight in dense.items():
        layer = lm.model.get_submodule(module)
        assert np.array_equal(layer.dequantized_weight().numpy(), weight), module
        if weight.shape[1] == 128:
            want = x @ torch.from_numpy(weight).T
            assert torch.allclose(layer(x), want, atol=1e-4, rtol=1e-4), module
    with torch.no_grad():
        logits = lm(torch.tensor([[2, 5, 9, 11]])).logits
    assert logits.shape == (1, 4, 320) and bool(torch.isfinite(logits).all())


def test_family_module_whose_tensors_disagree_with_the_model_is_named(tmp_path: Path, wide_llama: Path) -> None:
    _write(wide_llama, tmp_path / "qqq", "qqq")
    checkpoint = open_quantized_checkpoint(tmp_path / "qqq")
    module = "model.layers.0.mlp.down_proj"
    with pytest.raises(qhf.errors.SourceFormatError, match=module.replace(".", r"\.")):
        checkpoint.weight_only_inputs(module, 128, 128)
