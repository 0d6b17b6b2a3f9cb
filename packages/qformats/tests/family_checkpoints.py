"""Tiny QQQ, ParoQuant, VPTQ and EXL3 checkpoint directories, written with each family's own pack function.

Each config carries the fields GPT-QModel 7.7.0's ``QQQConfig`` / ``ParoConfig`` / ``VPTQConfig`` /
``EXL3Config`` ``to_dict()`` writes (``meta`` left out). :func:`build_family` returns the dense float32
``[out, in]`` weight of every module, from the family's own ``dequantize``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from qformats.checkpoint import write_checkpoint
from qformats.layouts.exl3 import EXL3Weight, pack_exl3
from qformats.layouts.paroquant import ParoQuantWeight, identity_rotation, pack_paroquant
from qformats.layouts.qqq import QQQWeight, pack_qqq
from qformats.layouts.vptq import pack_vptq, spec_from_config
from random_weights import random_weight
from test_vptq_layout import random_vptq

COMMON = {"desc_act": False, "lm_head": False, "pack_dtype": "int32"}
CONFIGS: dict[str, dict[str, object]] = {
    "qqq": {"bits": 4, "group_size": -1, "sym": True, "wbits": 4, **COMMON},
    "paroquant": {"bits": 4, "group_size": 32, "zero_point": False, "krot": 2, **COMMON},
    "vptq": {
        "bits": 2,
        "group_size": -1,
        "vector_lens": [-1, 4],
        "num_centroids": [-1, 16],
        "num_res_centroids": [-1, 4],
        "npercent": 0.0,
        "group_num": 2,
        "enable_norm": True,
        "norm_dim": 0,
        "enable_perm": True,
        **COMMON,
    },
    "exl3": {"bits": 2.5, "group_size": -1, "out_scales": "auto", "codebook": "mcg", **COMMON},
}
METHODS = {"qqq": "qqq", "paroquant": "paroquant", "vptq": "vptq", "exl3": "exl3"}
PREFIXES = ("model.layers.0.mlp.up_proj", "model.layers.0.mlp.down_proj")
IN, OUT = 128, 128


def family_config(family: str) -> dict[str, object]:
    """The reference's quantization_config for ``family`` (method, format and checkpoint_format set)."""
    name = METHODS[family]
    return {**CONFIGS[family], "method": name, "quant_method": name, "format": name, "checkpoint_format": name}


def _module(family: str, rng: np.random.Generator, identity: bool) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """One module's tensors and its dense float32 ``[OUT, IN]`` weight."""
    if family == "qqq":
        codes = rng.integers(1, 16, (OUT, IN)).astype(np.uint8)
        qqq = QQQWeight(codes, None, (rng.random(OUT) * 0.01 + 1e-3).astype(np.float32), -1)
        return pack_qqq(qqq), qqq.dequantize()
    if family == "paroquant":
        weight = random_weight(rng, OUT, IN, 4, 32, sym=False)
        pairs, theta, scales = identity_rotation(IN, 32, 2)
        if not identity:
            theta = ((rng.random(theta.shape) - 0.5) * 2).astype(theta.dtype)
        paro = ParoQuantWeight(weight, pairs, theta, scales)
        return pack_paroquant(paro), paro.dequantize()
    if family == "vptq":
        spec = spec_from_config(CONFIGS["vptq"], IN, OUT)
        vptq = random_vptq(rng, spec)
        return pack_vptq(vptq), vptq.dequantize().astype(np.float32)
    symbols = rng.integers(0, 1 << 3, (IN // 16, OUT // 16, 256)).astype(np.uint8)
    exl3 = EXL3Weight(symbols, 3, "mcg", (rng.random(IN) + 0.5).astype(np.float16), rng.random(OUT).astype(np.float16))
    return pack_exl3(exl3), exl3.dequantize().astype(np.float32)


def build_family(path: Path, family: str, *, seed: int = 0, identity: bool = True) -> dict[str, np.ndarray]:
    """Write a two-module ``family`` checkpoint (plus a bias and a norm); returns the dense weights by prefix."""
    rng = np.random.default_rng(seed)
    tensors: dict[str, np.ndarray] = {"model.norm.weight": np.ones(IN, np.float32)}
    dense: dict[str, np.ndarray] = {}
    for prefix in PREFIXES:
        packed, dense[prefix] = _module(family, rng, identity)
        tensors.update({f"{prefix}.{name}": array for name, array in packed.items()})
        tensors[f"{prefix}.bias"] = np.linspace(-1, 1, OUT).astype(np.float16)
    write_checkpoint(
        path,
        tensors,
        quantize_config=family_config(family),
        model_config={"model_type": "llama", "hidden_size": IN},
    )
    return dense
