"""``load_quantized(dir, backend=AUTO)``: a transformers model whose quantized linears are qkernels modules.

The skeleton is built on the meta device from ``config.json``; every module stored in layout tensors
(``<module>.qweight`` ...) becomes a qkernels module chosen by ``select`` for the requested backend (FP8 /
bitsandbytes / GGUF, QQQ, ParoQuant, VPTQ and EXL3 modules: ``qkernels.weight_only_linear``, the last four
served by the torch reference backend from the dense equivalent weight); everything else is read from the
shards. The result can ``generate``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from qformats.config import QuantizeConfig
from qlooper.module_access import linear_features
from torch import nn

from .architectures.conv1d import conv1d_weights, skeleton_layout
from .checkpoint_reader import QuantizedCheckpoint, open_quantized_checkpoint
from .config_view import adapter as eora_adapter
from .errors import SourceFormatError
from .source.skeleton import (
    embedding_names,
    load_buffers,
    materialize_names,
    meta_parameters,
    meta_skeleton,
    persistent_buffers,
    tied_output,
)

AUTO = "auto"


@dataclass
class QuantizedCausalLM:
    """A loaded quantized model: the transformers ``model`` (callable, ``generate``), its ``tokenizer``,
    the checkpoint's quantization ``config`` and, per quantized module, the backend serving it (``backends``)."""

    model: Any  # a transformers PreTrainedModel
    tokenizer: Any
    config: QuantizeConfig
    path: Path
    backends: dict[str, str] = field(default_factory=dict)

    @property
    def settings(self) -> QuantizeConfig:
        """Deprecated name of :attr:`config` (``DeprecationWarning``)."""
        warnings.warn("QuantizedCausalLM.settings is deprecated; use .config", DeprecationWarning, stacklevel=2)
        return self.config

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.model(*args, **kwargs)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        return self.model.generate(*args, **kwargs)

    def generate_text(self, prompt: str, max_new_tokens: int = 32) -> str:
        """Greedy continuation of ``prompt`` (decoded, prompt excluded)."""
        ids = self.tokenizer(prompt, return_tensors="pt").to(self.model.device)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        out = self.model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad)
        return str(self.tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True))


def _install(model: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(parent_name) if parent_name else model, leaf, module)


def build_quantized_model(
    checkpoint: QuantizedCheckpoint,
    *,
    backend: str = AUTO,
    dtype: torch.dtype = torch.float32,
    shared: Callable[[str], torch.Tensor | None] | None = None,
    device: str | torch.device = "cpu",
    skip_prefix: str | None = None,
) -> tuple[nn.Module, dict[str, str]]:
    """The model with qkernels modules for every stored quantized module; returns (model, backends).

    The skeleton's fused experts are unfused first (as when quantizing), so per-expert modules match.

    ``shared(name)`` may return a tensor already proven bit-identical to the stored one (verify-after-save
    uses it to avoid a second copy of the embeddings); ``None`` reads the file. ``device``: where the model
    runs (the quantized modules are built there, qkernels picking a backend for that device; the dense
    tensors are moved there after reading). ``skip_prefix`` (e.g.
    ``"model.layers."``): modules and tensors under it stay on meta (a streaming verify fills the decoder layers
    one at a time, :mod:`qhf.verify_streaming`); an EoRA adapter is then not wrapped.
    """
    config = checkpoint.directory.config
    model = meta_skeleton(config, dtype)
    skeleton_buffers = persistent_buffers(model)  # the model's own, not the quantized modules' layout tensors
    embed, head = embedding_names(model)
    backends: dict[str, str] = {}
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    for name in names:
        if not checkpoint.is_quantized(name) or (skip_prefix is not None and name.startswith(skip_prefix)):
            continue
        dense = model.get_submodule(name)
        module = checkpoint.build_module(name, *linear_features(dense), backend=backend, dtype=dtype, device=device)
        _install(model, name, module)
        selection = getattr(module, "selection", None)
        backends[name] = str(getattr(selection, "backend", type(module).__name__))
    tied = tied_output(config, model)
    wanted = [
        n
        for n in meta_parameters(model)
        if not (tied and n == head) and not (skip_prefix is not None and n.startswith(skip_prefix))
    ]
    absent = [n for n in wanted if n not in checkpoint.reader]
    if absent:
        raise SourceFormatError(
            f"{checkpoint.directory.path}: the checkpoint lacks {len(absent)} tensor(s): {', '.join(absent[:5])}"
        )

    transposed = conv1d_weights(model)  # a dense Conv1D's weight: [in, out] in the file, [out, in] here

    def read(name: str) -> torch.Tensor:
        same = shared(name) if shared is not None else None
        return same if same is not None else skeleton_layout(name, checkpoint.reader.get(name, dtype), transposed)

    materialize_names(model, wanted, read, dtype)
    # stored buffers (a router's correction bias), in their own dtype; those not stored stay as the config made them
    load_buffers(model, [n for n in skeleton_buffers if n in checkpoint.reader], checkpoint.reader.get)
    adapter = eora_adapter(checkpoint.config)
    if adapter is not None and skip_prefix is None:  # EoRA: the adapter directory the config names, around them
        from .lora_adapter import read_adapter, wrap_modules

        factors = read_adapter(
            Path(checkpoint.directory.path) / adapter["path"], int(adapter["rank"]), Path(checkpoint.directory.path)
        )
        wrap_modules(model, {name: (a.to(dtype), b.to(dtype)) for name, (a, b) in factors.items()})
    if tied:
        model.get_submodule(head.rsplit(".", 1)[0]).weight = model.get_submodule(embed.rsplit(".", 1)[0]).weight
    for buffer_name, buffer in model.named_buffers():
        if buffer.device.type == "meta" and not (skip_prefix is not None and buffer_name.startswith(skip_prefix)):
            raise SourceFormatError(f"buffer {buffer_name!r} was left on the meta device")
    if torch.device(device).type != "cpu":
        model.to(device)  # the dense tensors (the quantized modules are there already)
    return model.eval(), backends


def load_quantized(
    path: str | Path,
    backend: str = AUTO,
    *,
    dtype: torch.dtype = torch.float32,
    tokenizer: Any = None,
    device: str | torch.device = "cpu",
) -> QuantizedCausalLM:
    """Load a quantized checkpoint directory for inference (see the module docstring). ``device``: ``cpu``
    (default), ``cuda`` or ``cuda:N`` (qkernels' Triton kernels serve the modules on a GPU); a device this
    machine lacks raises qlooper's ``DeviceError`` naming it and the available ones before anything is read."""
    from qlooper.devices import resolve_device

    from .tokenizer import load_tokenizer

    target = resolve_device(device, argument="device")
    checkpoint = open_quantized_checkpoint(path)
    model, backends = build_quantized_model(checkpoint, backend=backend, dtype=dtype, device=target)
    if tokenizer is None:
        tokenizer = load_tokenizer(path)
    return QuantizedCausalLM(model, tokenizer, checkpoint.config, Path(path), backends)
