"""The tiny config of any causal-LM model type in transformers' mapping, and whether transformers runs it.

A type of ``MODEL_FOR_CAUSAL_LM_MAPPING`` without fields of its own in ``architecture_coverage.FAMILIES``
gets the common tiny sizes of ``tiny_models.tiny_config`` (2 layers, hidden 64, 4 heads, 2 KV heads) plus
the tiny value of each size field in :data:`SHRINK` that its default config defines (experts, MLA ranks,
head dim, sliding window), so no field is spelled out per type. :func:`transformers_check` then builds the
model (random weights) and runs transformers' own forward on 24 tokens; a type whose attention needs as many
KV heads as heads (DeepSeek's MLA) is retried with ``num_key_value_heads = num_attention_heads``. A model of
more than :data:`MAX_PARAMETERS` parameters (a composite config whose vision or audio sub-config keeps its
default size) is not built.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "qhf" / "tests"))

MAX_PARAMETERS = 20_000_000
"""Largest model a tiny config may build (parameters; the tiny text models hold well under 1M)."""

# Size field -> its tiny value, applied where the type's default config defines the field.
SHRINK: dict[str, Any] = {
    "num_local_experts": 4,
    "num_experts": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 64,
    "n_group": 1,
    "topk_group": 1,
    "kv_lora_rank": 32,
    "q_lora_rank": 32,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 16,
    "head_dim": 16,
    "sliding_window": 32,
    "unpadded_vocab_size": 320,  # Inkling 2 pads its unembedding to vocab_size on save: the tiny vocab unpadded
}


@dataclass
class TinyConfig:
    """``fields``: the config fields given on top of the common tiny ones; ``config``: the built config;
    ``parameters``: the model's parameter count; ``error``: why transformers' own build or forward failed
    (``None``: it ran)."""

    fields: dict[str, Any]
    config: Any
    parameters: int
    error: str | None


def auto_fields(model_type: str) -> dict[str, Any]:
    """The :data:`SHRINK` fields ``model_type``'s default config defines (not ``None``)."""
    from transformers import AutoConfig

    default = AutoConfig.for_model(model_type)
    return {k: v for k, v in SHRINK.items() if getattr(default, k, None) is not None}


def _parameters(config: Any) -> int:
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def _forward_error(config: Any) -> str | None:
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
        ids = torch.randint(0, 300, (1, 24), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            model(ids, use_cache=False)
    except Exception as error:  # transformers' own failure on this config, reported by type and message
        return f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"
    return None


def transformers_check(model_type: str, fields: dict[str, Any] | None = None) -> TinyConfig:
    """The tiny config of ``model_type`` (``fields``, else :func:`auto_fields`) and transformers' verdict on it.

    Raises whatever the config class raises on the tiny sizes (the caller reports it).
    """
    from tiny_models import tiny_config

    given = dict(fields) if fields is not None else auto_fields(model_type)
    config = tiny_config(model_type, **given)
    parameters = _parameters(config)
    if parameters > MAX_PARAMETERS:
        return TinyConfig(given, config, parameters, f"the tiny config builds {parameters:,} parameters")
    error = _forward_error(config)
    if error is not None and fields is None and getattr(config, "num_key_value_heads", None) not in (None, 4):
        retry = {**given, "num_key_value_heads": 4}  # as many KV heads as heads
        second = tiny_config(model_type, **retry)
        if _forward_error(second) is None:
            return TinyConfig(retry, second, parameters, None)
    return TinyConfig(given, config, parameters, error)
