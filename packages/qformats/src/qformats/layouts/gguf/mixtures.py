"""llama.cpp's K-quant mixtures: the ggml type each linear of a decoder gets under q4_k_m, q4_k_s, q5_k_m, q5_k_s.

The rule follows llama.cpp's ``llama_tensor_get_type_impl`` (``src/llama-quant.cpp``, ggml-org/llama.cpp at
commit 007dbbf3fd17). For a dense (non-MoE, non-Falcon) decoder of ``n`` layers, with ``i`` the layer index:

* ``more_bits(i, n)``: ``i < n // 8`` or ``i >= 7 * n // 8`` or ``(i - n // 8) % 3 == 2`` (the first and last
  eighth of the layers and every third layer between).
* ``q4_k_m``: base Q4_K; ``attn_v`` (``v_proj``) and ``ffn_down`` (``down_proj``) get Q6_K where
  ``more_bits``; a fused ``attn_qkv`` gets Q5_K.
* ``q5_k_m``: base Q5_K; the same ``attn_v`` / ``ffn_down`` rule gives Q6_K; a fused ``attn_qkv`` gets Q6_K.
* ``q4_k_s``: base Q4_K; ``attn_v`` of the first 4 layers and ``ffn_down`` of the first ``n // 8`` get Q5_K.
* ``q5_k_s``: Q5_K everywhere.

llama.cpp also gives ``output.weight`` (the lm_head) Q6_K; lowbit leaves the lm_head dense unless
``lm_head`` is set, and then applies the same rule (:data:`LM_HEAD`). llama.cpp's shape fallback (a K type
for a row length that is not a multiple of 256 becomes Q5_0 / Q5_1 / Q8_0) is not applied: the reference's
checkpoint directories zero-pad each row to whole blocks instead (:meth:`GGMLType.padded`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ...errors import ConfigError

#: The mixtures and their base ggml type.
MIXTURE_BASE: dict[str, str] = {"q4_k_m": "Q4_K", "q5_k_m": "Q5_K", "q4_k_s": "Q4_K", "q5_k_s": "Q5_K"}

#: Module leaf names of each llama.cpp tensor category that a mixture changes.
ATTN_V = frozenset({"v_proj"})
ATTN_QKV = frozenset({"qkv_proj", "query_key_value", "W_pack", "c_attn"})
FFN_DOWN = frozenset({"down_proj", "w2", "fc2", "dense_4h_to_h"})
LM_HEAD = "lm_head"

#: ggml type -> the ``(bits, public format)`` a config's dynamic override names it by.
TYPE_FIELDS: dict[str, tuple[int, str]] = {"Q4_K": (4, "q_k"), "Q5_K": (5, "q_k"), "Q6_K": (6, "q_k")}


def more_bits(layer: int, layers: int) -> bool:
    """llama.cpp's ``use_more_bits``: the first and last eighth of the layers and every third between."""
    eighth = layers // 8
    return layer < eighth or layer >= 7 * layers // 8 or (layer - eighth) % 3 == 2


def category(module: str) -> str:
    """``attn_v``, ``attn_qkv``, ``ffn_down``, ``output`` or ``other`` from a module's dotted name."""
    leaf = module.rsplit(".", 1)[-1]
    if leaf in ATTN_V:
        return "attn_v"
    if leaf in ATTN_QKV:
        return "attn_qkv"
    if leaf in FFN_DOWN:
        return "ffn_down"
    if leaf == LM_HEAD:
        return "output"
    return "other"


def mixture_type(mixture: str, module: str, layer: int, layers: int) -> str:
    """The ggml type ``mixture`` gives ``module`` of decoder layer ``layer`` (of ``layers``)."""
    name = mixture.strip().lower()
    base = MIXTURE_BASE.get(name)
    if base is None:
        raise ConfigError(f"format: {mixture!r} is not a K-quant mixture; known: {', '.join(MIXTURE_BASE)}")
    if not 0 <= layer < layers:
        raise ConfigError(f"{module}: layer {layer} is outside the model's {layers} layers")
    kind = category(module)
    if kind == "output":
        return "Q6_K"
    if name in ("q4_k_m", "q5_k_m"):
        if kind in ("attn_v", "ffn_down") and more_bits(layer, layers):
            return "Q6_K"
        if kind == "attn_qkv":
            return "Q5_K" if name == "q4_k_m" else "Q6_K"
    if name == "q4_k_s":
        if (kind == "attn_v" and layer < 4) or (kind == "ffn_down" and layer < layers // 8):
            return "Q5_K"
    return base


def mixture_types(mixture: str, modules: Iterable[tuple[str, int]], layers: int) -> dict[str, str]:
    """``{module: ggml type}`` for ``(full module name, layer index)`` pairs of a ``layers``-layer decoder."""
    return {module: mixture_type(mixture, module, layer, layers) for module, layer in modules}


def mixture_dynamic(mixture: str, types: dict[str, str]) -> dict[str, dict[str, int | str]]:
    """The reference's ``dynamic`` overrides recording ``types``: one exact ``+:^name$`` rule per module whose
    type differs from the mixture's base, naming it as ``{"bits": 6, "format": "q_k"}`` (Q6_K)."""
    base = MIXTURE_BASE[mixture.strip().lower()]
    rules: dict[str, dict[str, int | str]] = {}
    for module, qtype in types.items():
        if qtype == base:
            continue
        bits, public = TYPE_FIELDS[qtype]
        rules[f"+:^{re.escape(module)}$"] = {"bits": bits, "format": public}
    return rules
