"""Dense export: a plain transformers checkpoint whose quantized linears hold their dequantized weights
(QQQ modules: their family's dense weight, the int8 re-rounding included).

The result has no ``quantization_config`` and loads with ``AutoModelForCausalLM.from_pretrained`` (a
vision-language model with ``AutoModelForImageTextToText``, its processor files copied too); every other tensor
is copied unchanged. An EoRA checkpoint's adapter is folded in (``Q + lora_B @ lora_A``, in
float32 before the cast), so the export computes what ``load_quantized`` computes; a ParoQuant module is
written as its dense equivalent (the input transform folded into the weight). The dequantized
weights are written in ``dtype`` (float16 by default, as the reference's ``hf`` export does).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from qformats.checkpoint.publish import staged_directory
from qformats.checkpoint.side_files import copy_side_files
from qformats.checkpoint.writer import write_checkpoint_files
from qformats.errors import QFormatsError
from qlooper.module_access import linear_features

from .architectures.multimodal import PROCESSOR_FILES
from .checkpoint_reader import load_config_json, open_quantized_checkpoint
from .errors import SourceFormatError
from .save.tensor_stream import TensorEntry, bf16_names, numpy_stream
from .tokenizer import TOKENIZER_FILES


def _copied(checkpoint: Any, name: str) -> TensorEntry:
    """A tensor copied unchanged from the checkpoint (bfloat16 ones flagged for the writer)."""
    reader = checkpoint.reader
    return TensorEntry(name, reader.nbytes(name), partial(reader.get, name), bf16=reader.dtype(name) == torch.bfloat16)


def export_dense(
    checkpoint_dir: str | Path, out_dir: str | Path, *, dtype: torch.dtype = torch.float16, max_shard_size: str = "4GB"
) -> Path:
    """Write the dense export of quantized checkpoint ``checkpoint_dir`` into ``out_dir``."""
    checkpoint = open_quantized_checkpoint(checkpoint_dir)
    source, out = Path(checkpoint_dir), Path(out_dir)
    names = checkpoint.reader.names()
    modules = sorted({n.rsplit(".", 1)[0] for n in names if checkpoint.is_quantized(n.rsplit(".", 1)[0])})
    prefixes = tuple(m + "." for m in modules)
    entries: list[TensorEntry] = []
    factors = _adapter_factors(checkpoint)
    for module in modules:
        family = checkpoint.is_family_module(module)  # QQQ ...: dims from the tensors, its own dequantization
        if family:
            meta = checkpoint.entry(module).meta
            out_features, in_features = meta.out_features, meta.in_features
        else:
            out_features = int(np.shape(checkpoint.module_tensors(module)["scales"])[1])
            in_features = _in_features(checkpoint, module, out_features)

        def load(m: str = module, i: int = in_features, o: int = out_features) -> torch.Tensor:
            logical = checkpoint.module_logical(m, i, o)
            weight = torch.from_numpy(np.asarray(logical.dequantize(), dtype=np.float32))
            if m.lower() in factors:  # EoRA: the adapter folded in, Q + lora_B @ lora_A in float32
                a, b = factors[m.lower()]
                weight = weight + b.to(torch.float32) @ a.to(torch.float32)
            return weight.to(dtype)

        size = in_features * out_features * torch.empty(0, dtype=dtype).element_size()
        entries.append(TensorEntry(f"{module}.weight", size, load, bf16=dtype == torch.bfloat16))
        if f"{module}.bias" in checkpoint.reader:
            entries.append(_copied(checkpoint, f"{module}.bias"))
    for name in names:
        if not name.startswith(prefixes):
            entries.append(_copied(checkpoint, name))
    entries.sort(key=lambda e: e.name)
    config = load_config_json(source)
    config.pop("quantization_config", None)
    with staged_directory(out) as staging:  # published atomically with its tokenizer files
        write_checkpoint_files(
            staging,
            numpy_stream(entries),
            quantize_config=None,
            model_config=config,
            max_shard_size=max_shard_size,
            dtypes=bf16_names(entries),
        )
        try:  # inside the checkpoint directory and regular files only; a failed write names the output file
            copy_side_files(source, ("generation_config.json", *TOKENIZER_FILES, *PROCESSOR_FILES), staging, out)
        except QFormatsError as exc:
            raise SourceFormatError(str(exc)) from None
    return out


def _adapter_factors(checkpoint: Any) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """The EoRA factors the checkpoint's config names (module name -> (lora_A, lora_B)), else empty."""
    from .config_view import adapter as eora_adapter

    adapter = eora_adapter(checkpoint.config)
    if adapter is None:
        return {}
    from .lora_adapter import read_adapter

    return read_adapter(
        Path(checkpoint.directory.path) / adapter["path"], int(adapter["rank"]), Path(checkpoint.directory.path)
    )


def _stored_entry(checkpoint: Any, name: str) -> TensorEntry:
    """A tensor copied unchanged from the checkpoint (bfloat16 kept)."""
    reader = checkpoint.reader
    bf16 = reader.dtype(name) == torch.bfloat16
    return TensorEntry(name, reader.nbytes(name), lambda: reader.get(name), bf16)


def _in_features(checkpoint: object, module: str, out_features: int) -> int:
    """in_features of a quantized module from its config shape (via the model definition's skeleton)."""
    from .source.skeleton import meta_skeleton

    cache = getattr(checkpoint, "_skeleton", None)
    if cache is None:
        cache = meta_skeleton(checkpoint.directory.config)  # type: ignore[attr-defined]
        checkpoint._skeleton = cache  # type: ignore[attr-defined]
    return linear_features(cache.get_submodule(module))[0]


__all__ = ["export_dense"]
