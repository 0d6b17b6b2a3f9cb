"""Which ``nn.ModuleList`` of a causal LM holds its decoder layers, and which config field counts them.

The rule, in order (no per-type table):

1. the shallowest ``nn.ModuleList`` with ``num_hidden_layers`` children (``model.layers``; in a vision-language
   model, inside its language model: :func:`qhf.architectures.multimodal.language_model_path`); the field is
   ``num_hidden_layers``;
2. else (an encoder-decoder's ``*ForCausalLM``, whose config maps ``num_hidden_layers`` to ``encoder_layers``
   and counts the decoder's layers with ``decoder_layers``): the shallowest ``nn.ModuleList`` whose children
   are all of one class (the repeated block) and whose length equals an integer field of the (text) config.
   Several such lists at that depth (HRM's two stacks ``L_module.layers`` and ``H_module.layers``) are
   refused by name: the loop quantizes one list of layers, each run once per forward. The field recorded is,
   among the integer fields equal to that length: one named after a part of the list's path
   (``decoder_layers`` / ``num_decoder_layers`` for ``model.decoder.layers``), else one whose name holds
   ``layer``, else the first in name order.

Whether the list is on the forward path is checked by the discovery forward itself (a representative layer
that never runs is refused: :func:`qhf.architectures.discovery.discover`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from ..errors import UnsupportedArchitectureError
from .multimodal import language_model_path, text_config

DEFAULT_FIELD = "num_hidden_layers"


@dataclass(frozen=True)
class LayerList:
    """``path``: dotted path of the decoder-layer ``nn.ModuleList``; ``field``: the config field counting it;
    ``count``: its length."""

    path: str
    field: str
    count: int


def integer_fields(config: Any) -> dict[str, int]:
    """Every integer (not bool) field of ``config``'s dict form, by name."""
    data = config.to_dict() if hasattr(config, "to_dict") else dict(vars(config))
    return {k: v for k, v in data.items() if isinstance(v, int) and not isinstance(v, bool)}


def _lists(model: nn.Module) -> list[tuple[str, nn.ModuleList]]:
    inside = language_model_path(model)
    return [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, nn.ModuleList) and len(module) > 0 and (inside is None or name.startswith(inside + "."))
    ]


def _depth(name: str) -> int:
    return name.count(".")


def count_field(path: str, fields: dict[str, int], count: int) -> str:
    """The field of ``fields`` equal to ``count`` that counts the list at ``path`` (module docstring's order)."""
    equal = sorted(k for k, v in fields.items() if v == count)
    parts = [p for p in path.split(".") if p and not p.isdigit() and p != "layers"]
    named = [k for k in equal if any(k in (f"{p}_layers", f"num_{p}_layers") for p in parts)]
    layered = [k for k in equal if "layer" in k]
    return (named or layered or equal)[0]


def find_layer_list(model: nn.Module, config: Any) -> LayerList:
    """The decoder-layer list of ``model`` and its count field (module docstring); raises
    :class:`UnsupportedArchitectureError` naming what was found when no list, or several, fit."""
    text = text_config(config)
    count = getattr(text, DEFAULT_FIELD, None)
    lists = _lists(model)
    direct = [(name, len(module)) for name, module in lists if count and len(module) == count]
    if direct:
        path, length = min(direct, key=lambda item: (_depth(item[0]), item[0]))
        return LayerList(path, DEFAULT_FIELD, length)
    fields = integer_fields(text)
    repeated = [
        (name, module)
        for name, module in lists
        if len({type(child) for child in module}) == 1 and len(module) in fields.values()
    ]
    if not repeated:
        raise UnsupportedArchitectureError(
            f"{type(model).__name__}: no nn.ModuleList of {DEFAULT_FIELD}={count} decoder layers found, nor a "
            "list of one repeated block whose length an integer config field gives"
        )
    depth = min(_depth(name) for name, _ in repeated)
    shallowest = [(name, module) for name, module in repeated if _depth(name) == depth]
    if len(shallowest) > 1:
        described = ", ".join(
            f"{name} ({len(module)} x {type(module[0]).__name__})" for name, module in sorted(shallowest)
        )
        raise UnsupportedArchitectureError(
            f"{type(model).__name__}: no nn.ModuleList of {DEFAULT_FIELD}={count} decoder layers; several lists "
            f"of repeated blocks instead ({described}): the loop quantizes one list of decoder layers, each run "
            "once per forward"
        )
    path, module = shallowest[0]
    return LayerList(path, count_field(path, fields, len(module)), len(module))
