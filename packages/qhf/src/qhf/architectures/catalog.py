"""Hand-written overrides, checked against discovery: what tensor identity cannot show.

Discovery (:mod:`qhf.architectures.discovery`) finds every group and each norm feeding a group. Two AWQ
scalings go through an op discovery does not follow: ``v_proj -> o_proj`` (attention output is linear in
the values, valid when ``v_proj``'s output width equals ``o_proj``'s input width, i.e. no grouped-query
attention) and ``up_proj -> down_proj`` (``down_proj`` reads ``act(gate) * up``). An :class:`Override`
names, for known families, the groups it expects (checked: a mismatch raises), the linear previous ops it
adds where discovery found none (checked: same width), extra no-clip modules and the definition's name.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, cast

from qlooper.definition import ModelDefinition
from qlooper.module_access import module_tensor
from torch import nn

from ..errors import UnsupportedArchitectureError
from .config_refusals import refuse_in_place_rescale
from .discovery import Discovery, discover
from .multimodal import is_vision_language, refuse_layer_index_clash, text_config

_LLAMA_GROUPS = (
    ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    ("self_attn.o_proj",),
    ("mlp.gate_proj", "mlp.up_proj"),
    ("mlp.down_proj",),
)
_LLAMA_PREV = (("self_attn.o_proj", "self_attn.v_proj"), ("mlp.down_proj", "mlp.up_proj"))


@dataclass(frozen=True)
class Override:
    """``groups``: the groups discovery must find, in order; ``linear_prev``: ``(group's first module, linear
    previous op)`` pairs added when discovery found no previous op and the widths match; ``no_clip``: modules
    added to ``awq_no_clip``; ``name``: the definition's name (checkpoint identity)."""

    name: str
    groups: tuple[tuple[str, ...], ...]
    linear_prev: tuple[tuple[str, str], ...] = ()
    no_clip: tuple[str, ...] = ()


OVERRIDES: dict[str, Override] = {
    "llama": Override("llama", _LLAMA_GROUPS, _LLAMA_PREV),
    "mistral": Override("mistral", _LLAMA_GROUPS, _LLAMA_PREV),
    "qwen2": Override("qwen2", _LLAMA_GROUPS, _LLAMA_PREV),
    "qwen3": Override("qwen3", _LLAMA_GROUPS, _LLAMA_PREV),
    "gemma3_text": Override("gemma3", _LLAMA_GROUPS, _LLAMA_PREV),
    "phi3": Override(
        "phi3",
        (("self_attn.qkv_proj",), ("self_attn.o_proj",), ("mlp.gate_up_proj",), ("mlp.down_proj",)),
        no_clip=("self_attn.qkv_proj",),
    ),
}


def apply_override(definition: ModelDefinition, override: Override, layer: nn.Module) -> ModelDefinition:
    """``definition`` with ``override`` applied after checking it against ``layer`` (a layer of the model)."""
    found = tuple(g.modules for g in definition.groups)
    if found != override.groups:
        raise UnsupportedArchitectureError(
            f"override {override.name!r}: expected groups {list(override.groups)}, discovery found {list(found)}"
        )
    prev = dict(override.linear_prev)
    groups = []
    for group in definition.groups:
        source = prev.get(group.modules[0])
        if group.prev_op is None and source is not None:
            width = module_tensor(layer.get_submodule(source), "weight").shape[0]
            if all(module_tensor(layer.get_submodule(m), "weight").shape[1] == width for m in group.modules):
                group = replace(group, prev_op=source)
        groups.append(group)
    no_clip = definition.awq_no_clip + tuple(m for m in override.no_clip if m not in definition.awq_no_clip)
    return replace(definition, groups=tuple(groups), awq_no_clip=no_clip, name=override.name)


def definition_for(model: nn.Module, config: Any) -> Discovery:
    """The discovered definition of ``model`` (experts already unfused), with its family's override applied (a
    vision-language model's: its text config's ``model_type``, e.g. ``gemma3_text`` inside ``gemma3``).

    Raises :class:`UnsupportedArchitectureError` naming what was not understood.
    """
    family = text_config(config) if is_vision_language(config) else config
    refuse_in_place_rescale(family)
    found = discover(model, config)
    if family is not config:
        layers_path = found.definition.layers_path
        refuse_layer_index_clash(model, layers_path, len(cast(nn.ModuleList, model.get_submodule(layers_path))))
    override = OVERRIDES.get(str(getattr(family, "model_type", "")))
    if override is not None:
        layer = model.get_submodule(f"{found.definition.layers_path}.0")
        found.definition = apply_override(found.definition, override, layer)
    return found


def overridden_model_types() -> tuple[str, ...]:
    """Every ``config.model_type`` with a hand-written override, sorted."""
    return tuple(sorted(OVERRIDES))
