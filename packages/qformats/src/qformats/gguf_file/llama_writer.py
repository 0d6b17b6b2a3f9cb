"""Write a llama-architecture .gguf that llama.cpp loads: tensors by llama.cpp name, llama metadata, tokenizer.

``write_llama_gguf(path, config, tensors, tokenizer)`` takes Hugging Face names (``model.layers.N...``)
and, per tensor, either a dense float array (numpy shape ``[out, in]`` or ``[n]``) or ``(bytes, qtype)``
with uint8 ``[out, row_bytes]`` whole ggml blocks (a gguf-method checkpoint's ``qweight``). Dense 2-D
weights are encoded to ``qtype`` (the token embedding to ``embed_qtype``), 1-D tensors (norms) are stored
as F32. Every tensor's shape is checked against the config; q/k rows are permuted into llama.cpp's
rotary order (:func:`.llama_names.permute_qk`). With ``tie_word_embeddings`` no ``output.weight`` is
written (llama.cpp reuses ``token_embd``). Block types are limited to those llama.cpp runs
(:data:`LLAMA_CPP_TYPES`); the row length must be a whole number of blocks (llama.cpp has no padding).
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..layouts.gguf.codec import encode_rows
from ..layouts.gguf.types import ggml_type
from .errors import GGUFFileError
from .llama_metadata import llama_metadata
from .llama_names import gguf_name, permute_qk
from .values import GGUFValue
from .writer import TensorSource, write_gguf

log = logging.getLogger(__name__)

#: ggml tensor types this writer stores (llama.cpp runs all of them on CPU).
LLAMA_CPP_TYPES = ("F32", "F16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
_PLAIN = {"F32": np.float32, "F16": np.float16}


@dataclass
class LlamaGGUFSummary:
    """What :func:`write_llama_gguf` wrote: tensor count by ggml type, file size in bytes, tensors skipped."""

    path: str
    types: Counter[str] = field(default_factory=Counter)
    nbytes: int = 0
    skipped: list[str] = field(default_factory=list)


def expected_shapes(config: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """numpy shape of every llama parameter by Hugging Face name (``lm_head`` only when untied)."""
    hidden, inter = int(config["hidden_size"]), int(config["intermediate_size"])
    heads = int(config["num_attention_heads"])
    kv = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    vocab = int(config["vocab_size"])
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden), "model.norm.weight": (hidden,)}
    if not config.get("tie_word_embeddings", False):
        shapes["lm_head.weight"] = (vocab, hidden)
    per_layer = {
        "input_layernorm.weight": (hidden,), "post_attention_layernorm.weight": (hidden,),
        "self_attn.q_proj.weight": (heads * head_dim, hidden), "self_attn.k_proj.weight": (kv * head_dim, hidden),
        "self_attn.v_proj.weight": (kv * head_dim, hidden), "self_attn.o_proj.weight": (hidden, heads * head_dim),
        "mlp.gate_proj.weight": (inter, hidden), "mlp.up_proj.weight": (inter, hidden),
        "mlp.down_proj.weight": (hidden, inter),
    }  # fmt: skip
    for layer in range(int(config["num_hidden_layers"])):
        for suffix, shape in per_layer.items():
            shapes[f"model.layers.{layer}.{suffix}"] = shape
    return shapes


def check_type(qtype: str, what: str) -> str:
    """The ggml type name of ``qtype`` when llama.cpp runs it, else a named error."""
    name = ggml_type(qtype).name
    if name not in LLAMA_CPP_TYPES:
        raise GGUFFileError(f"{what}: ggml type {name} cannot be written for llama.cpp; expected one of "
                            f"{', '.join(LLAMA_CPP_TYPES)}")  # fmt: skip
    return name


def _stored(hf: str, source: TensorSource, shape: tuple[int, ...], qtype: str) -> TensorSource:
    """The tensor as written: block bytes checked against ``shape``, or a dense array encoded / cast."""
    if isinstance(source, tuple):
        data, kind = source
        t = ggml_type(check_type(kind, f"tensor {hf!r}"))
        if len(shape) != 2 or shape[1] % t.block_size:
            raise GGUFFileError(f"tensor {hf!r}: {t.name} blocks of {t.block_size} cannot hold rows of {shape[1:]} "
                                "values (llama.cpp needs whole blocks, no padding)")  # fmt: skip
        expected = (shape[0], t.row_bytes(shape[1]))
        if data.dtype != np.uint8 or tuple(data.shape) != expected:
            raise GGUFFileError(f"tensor {hf!r}: expected uint8 {expected} bytes of {t.name} for shape {shape}, "
                                f"found {data.dtype} {tuple(data.shape)}")  # fmt: skip
        return data, t.name
    dense = np.asarray(source)
    if tuple(dense.shape) != shape:
        raise GGUFFileError(f"tensor {hf!r}: expected shape {shape} from the config, found {tuple(dense.shape)}")
    if dense.ndim == 1:
        return np.ascontiguousarray(dense, dtype=np.float32)
    name = check_type(qtype, f"tensor {hf!r}")
    if name in _PLAIN:
        return np.ascontiguousarray(dense, dtype=_PLAIN[name])
    block = ggml_type(name).block_size
    if shape[1] % block:
        raise GGUFFileError(f"tensor {hf!r}: rows of {shape[1]} values are not whole {name} blocks of {block}; "
                            "choose a 32-element type (Q4_0, Q5_0, Q8_0)")  # fmt: skip
    return encode_rows(np.asarray(dense, dtype=np.float32), name, name=hf), name


def llama_tensors(
    config: Mapping[str, Any],
    tensors: Iterable[tuple[str, TensorSource]],
    *,
    qtype: str,
    embed_qtype: str,
    summary: LlamaGGUFSummary,
) -> dict[str, TensorSource]:
    """llama.cpp name -> stored tensor for every Hugging Face tensor (shapes checked, q/k permuted)."""
    shapes = expected_shapes(config)
    heads = int(config["num_attention_heads"])
    kv = int(config.get("num_key_value_heads") or heads)
    out: dict[str, TensorSource] = {}
    for hf, source in tensors:
        if hf == "lm_head.weight" and hf not in shapes:
            summary.skipped.append(hf)  # tied: llama.cpp reuses token_embd
            continue
        target = gguf_name(hf)
        if target is None or hf not in shapes:
            raise GGUFFileError(f"tensor {hf!r}: no llama.cpp tensor for it in a llama .gguf")
        kind = embed_qtype if hf == "model.embed_tokens.weight" else qtype
        stored = _stored(hf, source, shapes[hf], kind)
        if hf.endswith(("q_proj.weight", "k_proj.weight")):
            count = heads if hf.endswith("q_proj.weight") else kv
            if isinstance(stored, tuple):
                stored = (permute_qk(stored[0], count, name=hf), stored[1])
            else:
                stored = permute_qk(stored, count, name=hf)
        out[target] = stored
        summary.types[stored[1] if isinstance(stored, tuple) else ("F32" if stored.dtype == np.float32 else "F16")] += 1
    missing = [hf for hf in shapes if gguf_name(hf) not in out]
    if missing:
        shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
        raise GGUFFileError(f"the model lacks {len(missing)} tensor(s) a llama .gguf needs: {shown}")
    return out


def _file_type(stored: Mapping[str, TensorSource]) -> str:
    kinds = Counter(
        s[1] if isinstance(s, tuple) else ("F32" if s.dtype == np.float32 else "F16")
        for name, s in stored.items()
        if name.startswith("blk.") and (s[0] if isinstance(s, tuple) else s).ndim == 2
    )
    return kinds.most_common(1)[0][0] if kinds else "F32"


def write_llama_gguf(
    path: str | os.PathLike[str],
    config: Mapping[str, Any],
    tensors: Iterable[tuple[str, TensorSource]],
    tokenizer: Mapping[str, GGUFValue],
    *,
    qtype: str = "Q8_0",
    embed_qtype: str = "Q8_0",
    name: str = "",
    extra: Mapping[str, GGUFValue] | None = None,
) -> LlamaGGUFSummary:
    """Write ``path`` (atomically); see the module docstring. ``extra`` adds ``general.*`` keys (license ...)."""
    summary = LlamaGGUFSummary(os.fspath(path))
    stored = llama_tensors(config, tensors, qtype=qtype, embed_qtype=embed_qtype, summary=summary)
    metadata: dict[str, Any] = llama_metadata(config, name=name or "model", file_type=_file_type(stored))
    for key, value in (extra or {}).items():
        metadata.setdefault(key, value)
    metadata.update(tokenizer)
    if "tokenizer.ggml.tokens" not in metadata:
        raise GGUFFileError(f"{path}: no tokenizer.ggml.tokens given; llama.cpp cannot load a .gguf without one")
    if summary.skipped:
        log.info("%s: tied embeddings, not written: %s", path, summary.skipped)
    write_gguf(path, metadata, stored)
    summary.nbytes = os.path.getsize(path)
    return summary
