"""The model skeleton on the meta device, materialized one module subtree at a time.

:func:`meta_skeleton` builds the transformers model from its config with every *parameter* on the meta
device (no memory) while buffers computed from the config (rotary ``inv_freq``) stay real on the CPU.
:func:`materialize` fills the parameters under one prefix (say ``model.layers.3``) from a tensor source;
:func:`release` sends them back to meta. Peak memory is then one decoder layer plus what the caller keeps.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..errors import SourceFormatError

if TYPE_CHECKING:
    from ..architectures.fused_experts import FusedSlice

logger = logging.getLogger(__name__)

TensorSource = Callable[[str], torch.Tensor]


@contextmanager
def _parameters_on_meta() -> Iterator[None]:
    """While active, every parameter registered on any module is moved to the meta device."""
    original = nn.Module.register_parameter

    def register(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        if param is not None and param.device.type != "meta":
            param = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        original(module, name, param)

    nn.Module.register_parameter = register  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        nn.Module.register_parameter = original  # type: ignore[method-assign]


def meta_skeleton(config: Any, dtype: torch.dtype = torch.float32) -> nn.Module:
    """``AutoModelForCausalLM.from_config(config)`` (a vision-language model's ``AutoModelForImageTextToText``:
    :func:`qhf.architectures.multimodal.model_class`) with parameters on meta, in eval mode, fused 3-D experts
    unfused into per-expert linears (:func:`qhf.architectures.fused_experts.unfuse_experts`), transformers'
    ``Conv1D`` modules replaced with linears (:func:`qhf.architectures.conv1d.linearize_conv1d`)."""
    from ..architectures.conv1d import linearize_conv1d
    from ..architectures.fused_experts import unfuse_experts
    from ..architectures.multimodal import model_class
    from .remote_code import TRUST_REMOTE_CODE

    with _parameters_on_meta():
        auto = model_class(config)
        try:
            model = auto.from_config(
                config, dtype=dtype, attn_implementation="sdpa", trust_remote_code=TRUST_REMOTE_CODE
            )
        except ValueError as error:  # a family without an SDPA path (Gemma 2, GPT-OSS, BLOOM) runs eager
            if "attention implementation" not in str(error):
                raise
            logger.info("%s: no SDPA attention in transformers, using eager attention", config.model_type)
            model = auto.from_config(
                config, dtype=dtype, attn_implementation="eager", trust_remote_code=TRUST_REMOTE_CODE
            )
    unfuse_experts(model)
    linearize_conv1d(model)
    evaluated: nn.Module = model.eval()  # transformers' auto classes are untyped
    return evaluated


def fused_expert_slices(model: nn.Module) -> dict[str, dict[str, FusedSlice]]:
    """Per unfused experts module of ``model``: where each of its parameters lives in the fused tensors."""
    from ..architectures.fused_experts import UnfusedExperts

    return {name: module.slices for name, module in model.named_modules() if isinstance(module, UnfusedExperts)}


def embedding_names(model: Any) -> tuple[str, str]:
    """Dotted weight names of the input embedding and the output projection (``lm_head.weight``)."""
    names = {id(module): name for name, module in model.named_modules(remove_duplicate=False)}
    embed, head = model.get_input_embeddings(), model.get_output_embeddings()
    if head is None or id(head) not in names or id(embed) not in names:
        raise SourceFormatError(f"{type(model).__name__}: expected input and output embeddings, found none")
    return f"{names[id(embed)]}.weight", f"{names[id(head)]}.weight"


def tied_output(config: Any, model: nn.Module | None = None) -> bool:
    """Whether the output projection shares the input embedding's weight (a vision-language ``model``: as
    transformers ties it, :func:`qhf.architectures.multimodal.head_tied`)."""
    from ..architectures.multimodal import head_tied

    tied = head_tied(model) if model is not None else None
    if tied is not None:
        return tied
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return bool(getattr(text, "tie_word_embeddings", getattr(config, "tie_word_embeddings", False)))


def _set_parameter(module: nn.Module, name: str, value: torch.Tensor, full: str) -> None:
    old = module._parameters[name]
    if old is not None and tuple(old.shape) != tuple(value.shape):
        raise SourceFormatError(f"tensor {full!r}: expected shape {tuple(old.shape)}, found {tuple(value.shape)}")
    module._parameters[name] = nn.Parameter(value, requires_grad=False)


def materialize(model: nn.Module, prefix: str, source: TensorSource, dtype: torch.dtype | None = None) -> int:
    """Load every meta parameter under ``prefix`` (``""`` = whole model) from ``source(name)``.

    Returns the number of bytes materialized. Parameters already real are left alone.
    """
    root = model.get_submodule(prefix) if prefix else model
    loaded = 0
    for module_name, module in root.named_modules():
        for name, param in list(module._parameters.items()):
            if param is None or param.device.type != "meta":
                continue
            full = ".".join(p for p in (prefix, module_name, name) if p)
            tensor = source(full)
            if dtype is not None and tensor.is_floating_point():
                tensor = tensor.to(dtype)
            _set_parameter(module, name, tensor.contiguous(), full)
            loaded += tensor.numel() * tensor.element_size()
    return loaded


def materialize_names(
    model: nn.Module, names: list[str], source: TensorSource, dtype: torch.dtype | None = None
) -> int:
    """Load the named parameters (full dotted names) from ``source(name)``; returns bytes loaded."""
    loaded = 0
    for full in names:
        module_name, _, pname = full.rpartition(".")
        module = model.get_submodule(module_name) if module_name else model
        tensor = source(full)
        if dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(dtype)
        _set_parameter(module, pname, tensor.contiguous(), full)
        loaded += tensor.numel() * tensor.element_size()
    return loaded


def _to_meta(module: nn.Module) -> None:
    """Replace ``module``'s own real parameters with meta ones (frees their memory)."""
    for name, param in list(module._parameters.items()):
        if param is not None and param.device.type != "meta":
            module._parameters[name] = nn.Parameter(param.to("meta"), requires_grad=False)


def release(model: nn.Module, prefix: str) -> None:
    """Send every parameter under ``prefix`` back to the meta device (frees its memory)."""
    root = model.get_submodule(prefix) if prefix else model
    for module in root.modules():
        _to_meta(module)


def release_outside(model: nn.Module, prefix: str) -> None:
    """Send every parameter of modules outside the subtree at dotted ``prefix`` back to meta."""
    inside = prefix + "."
    for name, module in model.named_modules(remove_duplicate=False):
        if name != prefix and not name.startswith(inside):
            _to_meta(module)


def persistent_buffers(model: nn.Module) -> list[str]:
    """Dotted names of ``model``'s persistent buffers: the state dict's entries that are no parameter (a MoE
    router's ``e_score_correction_bias``), which checkpoints store; computed ones (rotary ``inv_freq``) are
    registered non-persistent and not listed."""
    names = []
    for module_name, module in model.named_modules():
        for name, buffer in module._buffers.items():
            if buffer is not None and name not in module._non_persistent_buffers_set:
                names.append(f"{module_name}.{name}" if module_name else name)
    return names


def load_buffers(model: nn.Module, names: list[str], source: TensorSource) -> int:
    """Copy ``source(name)`` into each named buffer, in the buffer's own dtype (as ``from_pretrained`` loads a
    buffer); a stored tensor of another shape raises :class:`SourceFormatError`. Returns bytes copied."""
    copied = 0
    for full in names:
        module_name, _, name = full.rpartition(".")
        module = model.get_submodule(module_name) if module_name else model
        buffer = module._buffers[name]
        if buffer is None:
            continue
        value = source(full)
        if tuple(value.shape) != tuple(buffer.shape):
            raise SourceFormatError(
                f"tensor {full!r}: expected shape {tuple(buffer.shape)}, found {tuple(value.shape)}"
            )
        module._buffers[name] = value.to(device=buffer.device, dtype=buffer.dtype).contiguous()
        copied += value.numel() * value.element_size()
    return copied


def meta_parameters(model: nn.Module) -> list[str]:
    """Names of parameters still on the meta device (empty once fully materialized)."""
    return [n for n, p in model.named_parameters(remove_duplicate=False) if p.device.type == "meta"]
