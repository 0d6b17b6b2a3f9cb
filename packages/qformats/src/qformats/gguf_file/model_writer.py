"""Write a .gguf that llama.cpp loads, for any architecture record the writer covers: llama.cpp's tensor names,
the stored conversions, the metadata llama.cpp reads, and the tokenizer.

``write_model_gguf(path, config, tensors, tokenizer)`` takes Hugging Face names (``model.layers.N...``) and, per
tensor, either a dense float array (numpy shape, e.g. ``[out, in]`` or ``[n]``) or ``(bytes, qtype)`` with
uint8 ``[..., row_bytes]`` whole ggml blocks (a gguf-method checkpoint's ``qweight``). The config's
``model_type`` picks the :mod:`.architecture_table` record (:func:`.write_metadata.writable_record` refuses the
rest by name); each tensor is stored under the record's llama.cpp name(s) with its reading conversion undone:

* ``rope_q`` / ``rope_k``: rows permuted into llama.cpp's rotary order (:func:`.write_names.permute_qk`; whole
  rows move, so block bytes are permuted without decoding);
* ``norm_offset``: Gemma's norms stored as ``1 + w`` (float32);
* ``row_vector``: Qwen2-MoE's ``[1, H]`` shared-expert gate stored as ``[H]``;
* ``gate_up_experts``: the fused ``[E, 2M, H]`` experts split into ``ffn_gate_exps`` / ``ffn_up_exps``.
  Per-expert projections (``...mlp.experts.<e>.{gate,up,down}_proj.weight``, how quantized checkpoints store
  them) are stacked first.

Every tensor's shape is checked against the config (:mod:`.write_shapes`). 1-D tensors (norms, biases) and the
record's ``f32`` tensors (MoE routers) are stored as F32; other dense tensors are encoded to ``qtype`` (the token
embedding to ``embed_qtype``). With ``tie_word_embeddings`` no ``output.weight`` is written (llama.cpp reuses
``token_embd``). Block types are limited to those llama.cpp runs (:data:`LLAMA_CPP_TYPES`); the row length must
be a whole number of blocks (llama.cpp has no padding).
"""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..layouts.gguf.codec import encode_rows
from ..layouts.gguf.types import ggml_type
from .architecture import GGUFArchitecture
from .errors import GGUFFileError
from .values import GGUFValue
from .write_metadata import config_value, model_metadata, unused_values, writable_record
from .write_names import gguf_names, permute_qk, writing_rule
from .write_shapes import expected_shapes
from .writer import TensorSource, write_gguf

log = logging.getLogger(__name__)

#: ggml tensor types this writer stores (llama.cpp runs all of them on CPU).
LLAMA_CPP_TYPES = ("F32", "F16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
_PLAIN = {"F32": np.float32, "F16": np.float16}
_EXPERT = re.compile(r"^(.+\.\d+\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight$")


@dataclass
class GGUFWriteSummary:
    """What :func:`write_model_gguf` wrote: the architecture record's key, tensor count by ggml type, file size
    in bytes, tensors skipped (tied ``lm_head``) and config values llama.cpp does not apply (``unused``)."""

    path: str
    architecture: str = ""
    types: Counter[str] = field(default_factory=Counter)
    nbytes: int = 0
    skipped: list[str] = field(default_factory=list)
    unused: list[str] = field(default_factory=list)


def check_type(qtype: str, what: str) -> str:
    """The ggml type name of ``qtype`` when llama.cpp runs it, else a named error."""
    name = ggml_type(qtype).name
    if name not in LLAMA_CPP_TYPES:
        raise GGUFFileError(f"{what}: ggml type {name} cannot be written for llama.cpp; expected one of "
                            f"{', '.join(LLAMA_CPP_TYPES)}")  # fmt: skip
    return name


def _checked(hf: str, source: TensorSource, shape: tuple[int, ...]) -> TensorSource:
    """``source`` checked against the Hugging Face ``shape``: block bytes ``[..., row_bytes]`` or a dense array."""
    if isinstance(source, tuple):
        data, kind = source
        t = ggml_type(check_type(kind, f"tensor {hf!r}"))
        if len(shape) < 2 or shape[-1] % t.block_size:
            raise GGUFFileError(f"tensor {hf!r}: {t.name} blocks of {t.block_size} cannot hold rows of {shape[-1:]} "
                                "values (llama.cpp needs whole blocks, no padding)")  # fmt: skip
        expected = (*shape[:-1], t.row_bytes(shape[-1]))
        if data.dtype != np.uint8 or tuple(data.shape) != expected:
            raise GGUFFileError(f"tensor {hf!r}: expected uint8 {expected} bytes of {t.name} for shape {shape}, "
                                f"found {data.dtype} {tuple(data.shape)}")  # fmt: skip
        return data, t.name
    dense = np.asarray(source)
    if tuple(dense.shape) != shape:
        raise GGUFFileError(f"tensor {hf!r}: expected shape {shape} from the config, found {tuple(dense.shape)}")
    return dense


def _dense_only(hf: str, source: TensorSource, what: str) -> np.ndarray:
    if isinstance(source, tuple):
        raise GGUFFileError(f"tensor {hf!r}: given as {source[1]} blocks; {what} needs the dense values")
    return np.asarray(source, dtype=np.float32)


def _rows(source: TensorSource, change: Any) -> TensorSource:
    """``change`` applied to the rows of a dense array or of block bytes."""
    return (change(source[0]), source[1]) if isinstance(source, tuple) else change(source)


def _stored_form(hf: str, conversion: str, source: TensorSource, config: Mapping[str, Any]) -> list[TensorSource]:
    """The tensor(s) llama.cpp stores for one Hugging Face parameter: the reading ``conversion`` undone."""
    if conversion == "identity":
        return [source]
    if conversion in ("rope_q", "rope_k"):
        heads = int(config["num_attention_heads"])
        count = heads if conversion == "rope_q" else int(config.get("num_key_value_heads") or heads)
        return [_rows(source, lambda rows: permute_qk(rows, count, name=hf))]
    if conversion == "norm_offset":
        return [_dense_only(hf, source, "the stored 1 + w") + np.float32(1)]
    if conversion == "row_vector":
        return [_dense_only(hf, source, "a row vector").reshape(-1)]
    if conversion == "gate_up_experts":
        half = (source[0] if isinstance(source, tuple) else source).shape[1] // 2
        return [_rows(source, lambda a: np.ascontiguousarray(a[:, :half])),
                _rows(source, lambda a: np.ascontiguousarray(a[:, half:]))]  # fmt: skip
    raise GGUFFileError(f"tensor {hf!r}: the writer cannot undo the reading conversion {conversion!r}")


def _encoded(hf: str, part: TensorSource, qtype: str) -> TensorSource:
    """A stored part as written: block bytes as given, 1-D as F32, other dense arrays cast or encoded."""
    if isinstance(part, tuple):
        return part
    if part.ndim == 1:
        return np.ascontiguousarray(part, dtype=np.float32)
    name = check_type(qtype, f"tensor {hf!r}")
    if name in _PLAIN:
        return np.ascontiguousarray(part, dtype=_PLAIN[name])
    block = ggml_type(name).block_size
    if part.shape[-1] % block:
        raise GGUFFileError(f"tensor {hf!r}: rows of {part.shape[-1]} values are not whole {name} blocks of {block}; "
                            "choose a 32-element type (Q4_0, Q5_0, Q8_0)")  # fmt: skip
    rows = encode_rows(np.asarray(part, dtype=np.float32).reshape(-1, part.shape[-1]), name, name=hf)
    return rows.reshape(*part.shape[:-1], rows.shape[-1]), name


def _stack(hf: str, parts: list[TensorSource]) -> TensorSource:
    """Per-expert tensors stacked on a new first axis (all dense, or all block bytes of one type)."""
    kinds = {p[1] if isinstance(p, tuple) else "dense" for p in parts}
    if len(kinds) != 1:
        raise GGUFFileError(f"tensor {hf!r}: its experts mix {', '.join(sorted(kinds))}; they must share one type")
    if isinstance(parts[0], tuple):
        return np.stack([p[0] for p in parts if isinstance(p, tuple)]), parts[0][1]
    return np.stack([np.asarray(p, dtype=np.float32) for p in parts])


def _fused_experts(
    tensors: Iterable[tuple[str, TensorSource]], record: GGUFArchitecture, config: Mapping[str, Any]
) -> Iterator[tuple[str, TensorSource]]:
    """``tensors`` with per-expert projections stacked into the fused ``gate_up_proj`` / ``down_proj``."""
    fused = any(rule.hf == "mlp.experts.gate_up_proj" for rule in record.layer)
    count = int(config_value(config, "num_experts") or 0)
    pending: dict[str, dict[str, dict[int, TensorSource]]] = {}
    for hf, source in tensors:
        match = _EXPERT.match(hf) if fused else None
        if match is None:
            yield hf, source
            continue
        prefix, expert, proj = match.group(1), int(match.group(2)), match.group(3)
        if expert >= count:
            raise GGUFFileError(f"tensor {hf!r}: expert {expert} is outside the config's num_experts {count}")
        parts = pending.setdefault(prefix, {})
        parts.setdefault(proj, {})[expert] = source
        if len(parts.get("down", {})) == count:
            down = parts.pop("down")
            yield f"{prefix}.down_proj", _stack(f"{prefix}.down_proj", [down[i] for i in range(count)])
        if len(parts.get("gate", {})) == count and len(parts.get("up", {})) == count:
            gate, up = parts.pop("gate"), parts.pop("up")
            name = f"{prefix}.gate_up_proj"
            stacked = [_stack(name, [half[i] for i in range(count)]) for half in (gate, up)]
            yield name, _concat_experts(name, stacked)
    left = [f"{prefix}.<e>.{proj}_proj ({len(got)} of {count})" for prefix, parts in pending.items()
            for proj, got in parts.items() if len(got) < count]  # fmt: skip
    if left:
        raise GGUFFileError(f"the model lacks experts: {', '.join(left)}")


def _concat_experts(hf: str, halves: list[TensorSource]) -> TensorSource:
    """Stacked gate ``[E, M, ...]`` and up ``[E, M, ...]`` joined to ``[E, 2M, ...]`` (gate first)."""
    gate, up = halves
    if isinstance(gate, tuple) and isinstance(up, tuple) and gate[1] == up[1]:
        return np.concatenate([gate[0], up[0]], axis=1), gate[1]
    if isinstance(gate, tuple) or isinstance(up, tuple):
        raise GGUFFileError(f"tensor {hf!r}: the experts' gate and up projections differ in type; they must share one")
    return np.concatenate([gate, up], axis=1)


def model_tensors(
    config: Mapping[str, Any],
    record: GGUFArchitecture,
    tensors: Iterable[tuple[str, TensorSource]],
    *,
    qtype: str,
    embed_qtype: str,
    summary: GGUFWriteSummary,
) -> dict[str, TensorSource]:
    """llama.cpp name -> stored tensor for every Hugging Face tensor (shapes checked, conversions undone)."""
    shapes = expected_shapes(config, record)
    out: dict[str, TensorSource] = {}
    seen: set[str] = set()
    for hf, source in _fused_experts(tensors, record, config):
        if hf == "lm_head.weight" and hf not in shapes:
            summary.skipped.append(hf)  # tied: llama.cpp reuses token_embd
            continue
        found = writing_rule(hf, record)
        if found is None or hf not in shapes:
            raise GGUFFileError(f"tensor {hf!r}: no llama.cpp tensor for it in a {record.key} .gguf")
        rule, layer = found
        parts = _stored_form(hf, rule.conversion.name, _checked(hf, source, shapes[hf]), config)
        for local, name, part in zip(rule.gguf, gguf_names(rule, layer), parts, strict=True):
            kind = "F32" if local in record.write.f32 else embed_qtype if hf == "model.embed_tokens.weight" else qtype
            stored = _encoded(hf, part, kind)
            out[name] = stored
            summary.types[_type_name(stored)] += 1
        seen.add(hf)
    missing = [hf for hf in shapes if hf not in seen]
    if missing:
        shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
        raise GGUFFileError(f"the model lacks {len(missing)} tensor(s) a {record.key} .gguf needs: {shown}")
    return out


def _type_name(stored: TensorSource) -> str:
    return stored[1] if isinstance(stored, tuple) else ("F32" if stored.dtype == np.float32 else "F16")


def _file_type(stored: Mapping[str, TensorSource]) -> str:
    kinds = Counter(
        _type_name(s)
        for name, s in stored.items()
        if name.startswith("blk.") and (s[0] if isinstance(s, tuple) else s).ndim >= 2
    )
    return kinds.most_common(1)[0][0] if kinds else "F32"


def write_model_gguf(
    path: str | os.PathLike[str],
    config: Mapping[str, Any],
    tensors: Iterable[tuple[str, TensorSource]],
    tokenizer: Mapping[str, GGUFValue],
    *,
    qtype: str = "Q8_0",
    embed_qtype: str = "Q8_0",
    name: str = "",
    extra: Mapping[str, GGUFValue] | None = None,
) -> GGUFWriteSummary:
    """Write ``path`` (atomically); see the module docstring. ``extra`` adds ``general.*`` keys (license ...)."""
    record = writable_record(config)
    summary = GGUFWriteSummary(os.fspath(path), record.key, unused=unused_values(config, record))
    stored = model_tensors(config, record, tensors, qtype=qtype, embed_qtype=embed_qtype, summary=summary)
    metadata: dict[str, Any] = model_metadata(config, name=name or "model", file_type=_file_type(stored))
    for key, value in (extra or {}).items():
        metadata.setdefault(key, value)
    metadata.update(tokenizer)
    if "tokenizer.ggml.tokens" not in metadata:
        raise GGUFFileError(f"{path}: no tokenizer.ggml.tokens given; llama.cpp cannot load a .gguf without one")
    if summary.skipped:
        log.info("%s: tied embeddings, not written: %s", path, summary.skipped)
    for note in summary.unused:
        log.warning("%s: %s config %s", path, record.key, note)
    write_gguf(path, metadata, stored)
    summary.nbytes = os.path.getsize(path)
    return summary
