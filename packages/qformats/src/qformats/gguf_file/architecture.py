"""The record that says how one .gguf architecture maps onto a Hugging Face model, and its lookup.

A :class:`GGUFArchitecture` holds everything the dense reader needs for one ``general.architecture`` value:
the Hugging Face ``model_type`` and class, the metadata keys (under the ``<architecture>.`` prefix) that fill
config fields, fixed config defaults, config flags read from which tensors are present, and the tensor rules
(:class:`TensorRule`: llama.cpp names -> Hugging Face name, with a :mod:`.tensor_conversions` rule). The records
themselves are in :mod:`.architecture_table`; :func:`architecture_for` picks one from a file's metadata and
refuses an unknown architecture by name, listing the known ones.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import GGUFFileError
from .tensor_conversions import IDENTITY, Conversion

if TYPE_CHECKING:
    from .reader import GGUFReader

#: Fills config fields that a record computes from the file (its metadata and small tensors) after the mapped
#: keys are read: ``(config, reader)``, changing ``config`` in place; raises ``GGUFFileError`` on bad values.
ConfigRule = Callable[[dict[str, Any], "GGUFReader"], None]


@dataclass(frozen=True)
class TensorRule:
    """One Hugging Face parameter: ``gguf`` are the llama.cpp names it is read from (local to ``blk.N.`` for a
    layer rule; two for fused experts), ``hf`` its name (local to the layer prefix for a layer rule)."""

    gguf: tuple[str, ...]
    hf: str
    conversion: Conversion = IDENTITY


@dataclass(frozen=True)
class TensorFlag:
    """Config field ``field`` is ``when_present`` if tensor ``tensor`` (local to ``blk.N.``) is in the file,
    else ``not when_present`` (transformers' rule for StableLM's ``use_qkv_bias`` / ``use_parallel_residual``).
    ``also``: the other tensors that come and go with ``tensor`` (the writer expects all or none of them)."""

    field: str
    tensor: str
    when_present: bool
    also: tuple[str, ...] = ()


@dataclass(frozen=True)
class WriteRule:
    """What the .gguf writer needs for llama.cpp beyond inverting the reading rules.

    ``refused``: why the writer does not write the architecture (``None``: it does); ``allowed``: (config field,
    the values llama.cpp computes the same way, why) - a config holding another value is refused;
    ``same_as``: (config field, the field it must equal, why); ``untied_only``: llama.cpp needs ``output.weight``
    (it has no fallback to the token embedding), so tied models are refused; ``swa_pattern``: llama.cpp's fixed
    sliding-window pattern ``n`` (layer ``i`` slides when ``i % n < n - 1``), a config whose ``layer_types``
    differ is refused; ``unused``: (config field, what llama.cpp does instead) for values llama.cpp does not
    apply (logged and kept in the write summary); ``f32``: llama.cpp tensor names (local to ``blk.N.``) always
    stored as F32 (MoE routers, as llama.cpp's converter keeps them); ``gemma_27b_layers``: Gemma's
    ``query_pre_attn_scalar`` must be the one llama.cpp computes (``head_dim``, or ``hidden / heads`` for the
    27B model with this many layers).
    """

    refused: str | None = None
    allowed: tuple[tuple[str, tuple[Any, ...], str], ...] = ()
    same_as: tuple[tuple[str, str, str], ...] = ()
    untied_only: bool = False
    swa_pattern: int | None = None
    unused: tuple[tuple[str, str], ...] = ()
    f32: tuple[str, ...] = ()
    gemma_27b_layers: int | None = None


@dataclass(frozen=True)
class GGUFArchitecture:
    """How the .gguf architecture ``gguf`` reads as a Hugging Face model.

    ``key``: the table key; ``general_name``: when set, the record applies only to files whose
    ``general.name`` equals it (transformers reads a llama file named ``mistral`` as Mistral);
    ``config_keys``: (metadata key under ``<gguf>.``, config field); ``defaults``: config fields set before the
    metadata is read; ``layer_prefix``: the Hugging Face prefix of decoder layer ``N`` without ``.N``;
    ``ignored``: file tensors with no Hugging Face parameter that transformers recomputes (``rope_freqs``);
    ``always_tied``: ``tie_word_embeddings`` regardless of an ``output.weight`` tensor; ``limits``: (config field,
    the only value read, why) for files whose other values the mapping cannot convert; ``when_tensor``: the
    record applies only to files holding this layer tensor (local to ``blk.N.``; Falcon-40B's ``attn_norm_2``),
    and takes precedence over the architecture's record without one; ``config_rule``: a :data:`ConfigRule`
    run after the keys are read (Falcon's grouped-KV fields, Phi-3's LongRoPE factors); ``write``: what the
    .gguf writer adds to invert the record for llama.cpp (:class:`WriteRule`).
    """

    key: str
    gguf: str
    model_type: str
    hf_class: str
    config_keys: tuple[tuple[str, str], ...]
    globals: tuple[TensorRule, ...]
    layer: tuple[TensorRule, ...]
    layer_prefix: str = "model.layers"
    general_name: str | None = None
    defaults: tuple[tuple[str, Any], ...] = ()
    flags: tuple[TensorFlag, ...] = ()
    ignored: tuple[str, ...] = ()
    always_tied: bool = False
    limits: tuple[tuple[str, Any, str], ...] = ()
    when_tensor: str | None = None
    config_rule: ConfigRule | None = None
    write: WriteRule = WriteRule()


def architecture_for(
    metadata: Mapping[str, Any],
    table: tuple[GGUFArchitecture, ...],
    source: str,
    tensor_names: Collection[str] = (),
    refused: Mapping[str, str] | None = None,
) -> GGUFArchitecture:
    """The record of ``table`` for a file's plain metadata values (``GGUFReader.value``) and tensor names;
    ``source`` names the file in errors. ``refused``: architectures not read, each with the reason given in
    the error."""
    arch = metadata.get("general.architecture")
    known = sorted({record.gguf for record in table})
    if not isinstance(arch, str):
        raise GGUFFileError(f"{source}: general.architecture: expected a string (one of {', '.join(known)}), "
                            f"found {arch!r}")  # fmt: skip
    candidates = [record for record in table if record.gguf == arch]
    if not candidates and refused and arch in refused:
        raise GGUFFileError(f"{source}: general.architecture {arch!r} is not read as a Hugging Face model: "
                            f"{refused[arch]}; known architectures: {', '.join(known)}")  # fmt: skip
    if not candidates:
        raise GGUFFileError(
            f"{source}: general.architecture {arch!r} is not read as a Hugging Face model; "
            f"known architectures: {', '.join(known)}"
        )
    name = metadata.get("general.name")
    for record in candidates:
        if record.general_name is not None and record.general_name == name:
            return record
    local = {name.split(".", 2)[2] for name in tensor_names if name.startswith("blk.") and name.count(".") >= 2}
    for record in candidates:
        if record.general_name is None and record.when_tensor is not None and record.when_tensor in local:
            return record
    plain = [record for record in candidates if record.general_name is None and record.when_tensor is None]
    if len(plain) != 1:
        raise GGUFFileError(f"{source}: architecture table has {len(plain)} default records for {arch!r}")
    return plain[0]
