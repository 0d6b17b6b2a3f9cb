"""A Hugging Face config dict -> the architecture record the writer uses, and the metadata llama.cpp reads.

:func:`writable_record` picks the :mod:`.architecture_table` record whose ``model_type`` the config has and
refuses, naming the field, what llama.cpp would compute differently (the record's :class:`~.architecture.WriteRule`:
refused architectures, values outside ``allowed``, ``same_as`` pairs, tied embeddings where llama.cpp needs
``output.weight``, a sliding-window layer pattern other than llama.cpp's) and rope types other than
default / linear (llama.cpp's llama3 / longrope scaling needs rope factor tensors this writer does not build).

:func:`model_metadata` writes ``general.*`` and the ``<architecture>.*`` keys: the core hyperparameters in the
order llama.cpp's converter writes them, then every other key the record reads (sliding window, logit
softcapping, expert counts ...), ``rope.freq_base_swa`` when the config has a sliding-attention rope, and
``rope.scaling.*`` for linear scaling. llama.cpp checks every key's GGUF type, so integers are UINT32 and
floats FLOAT32, as its own converter writes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .architecture import GGUFArchitecture
from .architecture_table import ARCHITECTURES
from .errors import GGUFFileError
from .gemma_attention import llama_cpp_query_scalar
from .values import GGUFValue, ValueType

#: llama.cpp's ``llama_ftype`` for the predominant type of the 2-D weights (``general.file_type``).
FILE_TYPES = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10,
              "Q3_K": 11, "Q4_K": 14, "Q5_K": 16, "Q6_K": 18}  # fmt: skip
QUANTIZATION_VERSION = 2
#: Keys written first, in this order (llama.cpp's converter order); the record's other keys follow.
CORE_KEYS = ("vocab_size", "context_length", "embedding_length", "block_count", "feed_forward_length",
             "rope.dimension_count", "rope.freq_base", "attention.head_count", "attention.head_count_kv")  # fmt: skip
FLOAT_FIELDS = ("rope_theta", "rms_norm_eps", "norm_epsilon", "layer_norm_eps", "layer_norm_epsilon", "norm_eps",
                "attn_logit_softcapping", "final_logit_softcapping")  # fmt: skip


#: Config fields some transformers classes save under another name (Qwen3-MoE: ``num_local_experts``).
ALIASES = {"num_experts": "num_local_experts"}


def config_value(config: Mapping[str, Any], field: str) -> Any:
    """``config[field]``, or its :data:`ALIASES` spelling, or ``None``."""
    value = config.get(field)
    return config.get(ALIASES[field]) if value is None and field in ALIASES else value


def _u32(value: Any) -> GGUFValue:
    return GGUFValue(ValueType.UINT32, int(value))


def _f32(value: Any) -> GGUFValue:
    return GGUFValue(ValueType.FLOAT32, float(value))


def _required(config: Mapping[str, Any], key: str, source: str) -> Any:
    value = config.get(key)
    if value is None:
        raise GGUFFileError(f"{source}: config field {key!r} is missing; a .gguf needs it")
    return value


def rope(config: Mapping[str, Any]) -> tuple[float, str, Mapping[str, Any]]:
    """(rope theta, rope type, the scaling dict) of the full-attention layers from ``rope_parameters``
    (transformers 5; Gemma's per-layer-type dict) or the older fields."""
    params = config.get("rope_parameters") or config.get("rope_scaling") or {}
    params = params.get("full_attention", params)
    theta = params.get("rope_theta") or config.get("rope_theta") or 10000.0
    kind = params.get("rope_type") or params.get("type") or "default"
    return float(theta), str(kind), params


def partial_rotary(config: Mapping[str, Any], params: Mapping[str, Any]) -> float:
    """The rotated fraction of each head: ``partial_rotary_factor`` at the top of the config or, as transformers 5
    saves it, in ``rope_parameters`` (``params``, from :func:`rope`); 1.0 when neither has it."""
    return float(config.get("partial_rotary_factor") or params.get("partial_rotary_factor") or 1.0)


def head_dim(config: Mapping[str, Any]) -> int:
    """``head_dim``, or ``hidden_size // num_attention_heads`` when the config has none."""
    return int(config.get("head_dim") or int(config["hidden_size"]) // int(config["num_attention_heads"]))


def _refuse(source: str, record: GGUFArchitecture, what: str) -> GGUFFileError:
    return GGUFFileError(f"{source}: {what}; the {record.key} .gguf writer (for llama.cpp) refuses it")


def _check_rules(config: Mapping[str, Any], record: GGUFArchitecture, source: str) -> None:
    rule = record.write
    for field, values, why in rule.allowed:
        if config.get(field) not in values:
            raise _refuse(source, record, f"config {field} = {config.get(field)!r} (expected one of {values!r}: {why})")
    for field, other, why in rule.same_as:
        value, expected = config.get(field), head_dim(config) if other == "head_dim" else config.get(other)
        if value is not None and value != expected:
            raise _refuse(source, record, f"config {field} = {value!r} differs from {other} = {expected!r} ({why})")
    scalar = config.get("query_pre_attn_scalar")
    if rule.gemma_27b_layers is not None and scalar is not None:
        what, expected = llama_cpp_query_scalar({**config, "head_dim": head_dim(config)}, rule.gemma_27b_layers)
        if scalar != expected:
            raise _refuse(source, record, f"config query_pre_attn_scalar = {scalar!r} differs from {what} = "
                          f"{expected!r} (the scale llama.cpp's {record.gguf} computes)")  # fmt: skip
    if rule.untied_only and config.get("tie_word_embeddings"):
        raise _refuse(source, record, f"tie_word_embeddings is true but llama.cpp's {record.gguf} needs its own "
                      "output.weight")  # fmt: skip
    if rule.swa_pattern is not None:
        n, layers = rule.swa_pattern, int(_required(config, "num_hidden_layers", source))
        expected = ["sliding_attention" if i % n < n - 1 else "full_attention" for i in range(layers)]
        found = config.get("layer_types")
        pattern = config.get("sliding_window_pattern")
        if (found is not None and list(found) != expected) or (found is None and pattern not in (None, n)):
            raise _refuse(source, record, f"layer_types {found!r} / sliding_window_pattern {pattern!r}: llama.cpp's "
                          f"{record.gguf} uses full attention on every {n}th layer only")  # fmt: skip


def writable_record(config: Mapping[str, Any], source: str = "config.json") -> GGUFArchitecture:
    """The architecture record a config is written with, or a named refusal (see the module docstring)."""
    model_type = config.get("model_type")
    written = [r for r in ARCHITECTURES if r.write.refused is None]
    names = ", ".join(r.model_type for r in written)
    record = next((r for r in ARCHITECTURES if r.model_type == model_type), None)
    if record is None:
        raise GGUFFileError(f"{source}: model_type {model_type!r}: the .gguf writer writes {names}")
    if record.write.refused is not None:
        raise GGUFFileError(f"{source}: model_type {model_type!r} ({record.gguf}) is not written to a .gguf: "
                            f"{record.write.refused}; written: {names}")  # fmt: skip
    architectures = config.get("architectures") or [record.hf_class]
    if list(architectures) != [record.hf_class]:
        raise GGUFFileError(f"{source}: architectures {architectures!r}: a {model_type} .gguf holds "
                            f"{record.hf_class} (the causal LM) only")  # fmt: skip
    _, kind, params = rope(config)
    if kind not in ("default", "linear"):
        raise GGUFFileError(f"{source}: rope type {kind!r} ({dict(params)!r}): only 'default' or 'linear' rope "
                            f"can be written to a {record.gguf} .gguf")  # fmt: skip
    _check_rules(config, record, source)
    return record


def unused_values(config: Mapping[str, Any], record: GGUFArchitecture) -> list[str]:
    """The record's ``unused`` config values this config sets: 'field = value (what llama.cpp does)'."""
    return [f"{field} = {config[field]!r} ({what})" for field, what in record.write.unused
            if config.get(field) is not None]  # fmt: skip


def _value(key: str, field: str, config: Mapping[str, Any]) -> GGUFValue | None:
    value = config_value(config, field)
    if value is None or isinstance(value, (list, dict, str)):
        return None
    if isinstance(value, bool):
        return GGUFValue(ValueType.BOOL, value)
    return _f32(value) if field in FLOAT_FIELDS or isinstance(value, float) else _u32(value)


def model_metadata(
    config: Mapping[str, Any], *, name: str, file_type: str, source: str = "config.json"
) -> dict[str, GGUFValue]:
    """``general.*`` + ``<architecture>.*`` keys as typed :class:`GGUFValue` for a config dict."""
    record = writable_record(config, source)
    a = record.gguf
    hidden = int(_required(config, "hidden_size", source))
    heads = int(_required(config, "num_attention_heads", source))
    dim = head_dim(config)
    theta, kind, params = rope(config)
    core: dict[str, Any] = {
        "vocab_size": _u32(_required(config, "vocab_size", source)),
        "context_length": _u32(config.get("max_position_embeddings") or 2048),
        "embedding_length": _u32(hidden),
        "block_count": _u32(_required(config, "num_hidden_layers", source)),
        "feed_forward_length": _u32(_required(config, "intermediate_size", source)),
        "rope.dimension_count": _u32(int(dim * partial_rotary(config, params))),
        "rope.freq_base": _f32(theta),
        "attention.head_count": _u32(heads),
        "attention.head_count_kv": _u32(config.get("num_key_value_heads") or heads),
    }
    meta: dict[str, GGUFValue] = {
        "general.architecture": GGUFValue(ValueType.STRING, a),
        "general.name": GGUFValue(ValueType.STRING, name),
        "general.file_type": _u32(FILE_TYPES.get(file_type, 0)),
        "general.quantization_version": _u32(QUANTIZATION_VERSION),
        **{f"{a}.{key}": core[key] for key in CORE_KEYS},
    }
    eps = next((k for k in record.config_keys if k[0].startswith("attention.layer_norm")), None)
    if eps is not None:
        meta[f"{a}.{eps[0]}"] = _f32(config.get(eps[1]) or 1e-6)
    if dim != hidden // heads or any(field == "head_dim" and key != "rope.dimension_count"
                                     for key, field in record.config_keys):  # fmt: skip
        meta[f"{a}.attention.key_length"] = meta[f"{a}.attention.value_length"] = _u32(dim)
    for key, field in record.config_keys:
        value = _value(key, field, config)
        if f"{a}.{key}" not in meta and value is not None:
            meta[f"{a}.{key}"] = value
    sliding = (config.get("rope_parameters") or {}).get("sliding_attention")
    if isinstance(sliding, Mapping) and sliding.get("rope_theta") is not None:
        meta[f"{a}.rope.freq_base_swa"] = _f32(sliding["rope_theta"])
    if kind == "linear":
        meta[f"{a}.rope.scaling.type"] = GGUFValue(ValueType.STRING, "linear")
        meta[f"{a}.rope.scaling.factor"] = _f32(_required(params, "factor", f"{source} rope"))
    return meta
