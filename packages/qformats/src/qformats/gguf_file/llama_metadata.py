"""A Hugging Face ``LlamaConfig`` dict -> the ``general.*`` and ``llama.*`` keys llama.cpp reads.

llama.cpp checks every key's GGUF type, so integers are written as UINT32 and floats as FLOAT32, as its
own converter does. Only the llama architecture is accepted; rope scaling other than none/linear is
refused (llama.cpp's llama3 scaling needs a ``rope_freqs`` tensor this writer does not build).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import GGUFFileError
from .values import GGUFValue, ValueType

#: llama.cpp's ``llama_ftype`` for the predominant type of the 2-D weights (``general.file_type``).
FILE_TYPES = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10,
              "Q3_K": 11, "Q4_K": 14, "Q5_K": 16, "Q6_K": 18}  # fmt: skip
QUANTIZATION_VERSION = 2


def _u32(value: Any) -> GGUFValue:
    return GGUFValue(ValueType.UINT32, int(value))


def _f32(value: Any) -> GGUFValue:
    return GGUFValue(ValueType.FLOAT32, float(value))


def _required(config: Mapping[str, Any], key: str, source: str) -> Any:
    value = config.get(key)
    if value is None:
        raise GGUFFileError(f"{source}: config field {key!r} is missing; a llama .gguf needs it")
    return value


def _rope(config: Mapping[str, Any]) -> tuple[float, str, Mapping[str, Any]]:
    """(rope theta, rope type, the scaling dict) from ``rope_parameters`` (transformers 5) or the older fields."""
    params = config.get("rope_parameters") or config.get("rope_scaling") or {}
    theta = params.get("rope_theta") or config.get("rope_theta") or 10000.0
    kind = params.get("rope_type") or params.get("type") or "default"
    return float(theta), str(kind), params


def check_llama(config: Mapping[str, Any], source: str = "config.json") -> None:
    """Refuse a config that is not a plain llama (named field, expected vs found)."""
    model_type = config.get("model_type")
    architectures = config.get("architectures") or ["LlamaForCausalLM"]
    if model_type != "llama" or list(architectures) != ["LlamaForCausalLM"]:
        raise GGUFFileError(
            f"{source}: model_type {model_type!r} / architectures {architectures!r}: the .gguf writer supports "
            "only the llama architecture (model_type 'llama', LlamaForCausalLM)"
        )
    _, kind, params = _rope(config)
    if kind not in ("default", "linear"):
        raise GGUFFileError(
            f"{source}: rope type {kind!r} ({dict(params)!r}): only 'default' or 'linear' rope can be written "
            "to a llama .gguf"
        )
    if config.get("attention_bias") or config.get("mlp_bias"):
        raise GGUFFileError(f"{source}: attention_bias/mlp_bias: llama projections with biases are not supported")


def llama_metadata(
    config: Mapping[str, Any], *, name: str, file_type: str, source: str = "config.json"
) -> dict[str, GGUFValue]:
    """``general.*`` + ``llama.*`` keys as typed :class:`GGUFValue` for a llama config dict."""
    check_llama(config, source)
    hidden = int(_required(config, "hidden_size", source))
    heads = int(_required(config, "num_attention_heads", source))
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    meta: dict[str, GGUFValue] = {
        "general.architecture": GGUFValue(ValueType.STRING, "llama"),
        "general.name": GGUFValue(ValueType.STRING, name),
        "general.file_type": _u32(FILE_TYPES.get(file_type, 0)),
        "general.quantization_version": _u32(QUANTIZATION_VERSION),
        "llama.vocab_size": _u32(_required(config, "vocab_size", source)),
        "llama.context_length": _u32(config.get("max_position_embeddings") or 2048),
        "llama.embedding_length": _u32(hidden),
        "llama.block_count": _u32(_required(config, "num_hidden_layers", source)),
        "llama.feed_forward_length": _u32(_required(config, "intermediate_size", source)),
        "llama.rope.dimension_count": _u32(head_dim),
        "llama.rope.freq_base": _f32(_rope(config)[0]),
        "llama.attention.head_count": _u32(heads),
        "llama.attention.head_count_kv": _u32(kv_heads),
        "llama.attention.layer_norm_rms_epsilon": _f32(config.get("rms_norm_eps") or 1e-6),
    }
    if head_dim != hidden // heads:
        meta["llama.attention.key_length"] = _u32(head_dim)
        meta["llama.attention.value_length"] = _u32(head_dim)
    _, kind, params = _rope(config)
    if kind == "linear":
        meta["llama.rope.scaling.type"] = GGUFValue(ValueType.STRING, "linear")
        meta["llama.rope.scaling.factor"] = _f32(_required(params, "factor", f"{source} rope"))
    return meta
