"""Which tensor of a model a folded rotation rewrites, and how: a :class:`Step` list per tensor name.

Roles come from the discovered definition (:class:`qlooper.definition.ModelDefinition`) and the skeleton's
shapes, never from class names:

* **residual readers**: the linears of a group whose ``prev_op`` is a norm (a module with a 1-D ``weight``; the
  norm -> consumers mapping AWQ folds into); ``W -> W diag(offset + g) Q`` (``g``: the norm's weight, the
  definition's ``norm_weight_offset``), the norm's weight set to the identity (``1 - offset``);
* **residual writers**: every other linear of the layer whose output width is the hidden size (``o_proj``,
  ``down_proj``); ``W -> Qᵀ W``, bias ``b -> Qᵀ b``;
* outside the layers: the input embedding ``E -> E Q``; the final norm (the one module beside the layers with a
  hidden-size 1-D weight) folded into the output projection, ``W -> W diag(offset + g) Q``;
* **per-head value/output**: ``v_proj``'s output rows per KV head ``W_h -> Hᵀ W_h`` (bias likewise) and the
  ``o_proj`` beside it, input columns per attention head ``W_h -> W_h H`` (one ``H`` for every head, so grouped
  queries see their KV head's rotation).

A plan is only a proposal: :mod:`qhf.rotation.check` verifies it on a float64 replica before it is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from qlooper.definition import ModelDefinition, resolve_groups
from torch import nn

EMBED = "embed"
READ = "read"
WRITE = "write"
IDENTITY = "identity"
VALUE_HEADS = "value_heads"
OUTPUT_HEADS = "output_heads"


@dataclass(frozen=True)
class Step:
    """One rewrite of a tensor (module docstring); ``norm``: the full name of the norm weight a :data:`READ`
    folds in (None: no norm)."""

    kind: str
    norm: str | None = None


@dataclass(frozen=True)
class AttentionShape:
    """``head_dim``, query ``heads`` and ``kv_heads`` of the attention (from the config)."""

    head_dim: int
    heads: int
    kv_heads: int


@dataclass(frozen=True)
class LayerRoles:
    """One layer's roles (names relative to the layer): ``readers`` linear -> its norm, ``writers``, the
    ``value`` / ``output`` pair (None with ``heads_reason``)."""

    readers: dict[str, str]
    writers: tuple[str, ...]
    value: str | None
    output: str | None
    heads_reason: str | None


Plan = dict[str, tuple[Step, ...]]


def attention_shape(config: Any) -> AttentionShape | None:
    """The attention's head shape from a transformers config (its text config), or None when it has none."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = getattr(text, "num_attention_heads", None)
    hidden = getattr(text, "hidden_size", None)
    if not isinstance(heads, int) or heads < 1:
        return None
    head_dim = getattr(text, "head_dim", None)
    if not isinstance(head_dim, int) or head_dim < 1:
        if not isinstance(hidden, int) or hidden % heads:
            return None
        head_dim = hidden // heads
    kv_heads = getattr(text, "num_key_value_heads", None)
    if not isinstance(kv_heads, int) or kv_heads < 1:
        kv_heads = heads
    return AttentionShape(head_dim, heads, kv_heads)


def _is_norm(module: nn.Module | None) -> bool:
    weight = module._parameters.get("weight") if module is not None else None
    return weight is not None and weight.dim() == 1


def _value_output(
    linears: dict[str, nn.Linear], attention: AttentionShape | None
) -> tuple[str | None, str | None, str | None]:
    """``(value, output, None)`` or ``(None, None, reason)``."""
    if attention is None:
        return None, None, "the config gives no attention head shape (num_attention_heads, head_dim)"
    for name in linears:
        parent, _, last = name.rpartition(".")
        output = f"{parent}.o_proj" if parent else "o_proj"
        if last != "v_proj" or output not in linears:
            continue
        v_out, o_in = linears[name].out_features, linears[output].in_features
        if v_out != attention.kv_heads * attention.head_dim or o_in != attention.heads * attention.head_dim:
            return (
                None,
                None,
                (
                    f"{name} [{v_out} out] / {output} [{o_in} in] do not match {attention.kv_heads} KV heads and "
                    f"{attention.heads} heads of {attention.head_dim}"
                ),
            )
        return name, output, None
    return None, None, "no v_proj / o_proj pair among the layer's quantized linears"


def layer_roles(
    layer: nn.Module, prefix: str, definition: ModelDefinition, hidden: int, attention: AttentionShape | None
) -> LayerRoles:
    """The roles of ``layer`` (at dotted ``prefix``) under ``definition`` (module docstring)."""
    readers: dict[str, str] = {}
    linears: dict[str, nn.Linear] = {}
    for group in resolve_groups(layer, prefix, definition):
        for resolved in group.modules:
            if isinstance(resolved.module, nn.Linear):
                linears[resolved.name] = resolved.module
            if group.prev_op_name is not None and _is_norm(group.prev_op):
                readers[resolved.name] = group.prev_op_name
    writers = tuple(
        name
        for name, module in layer.named_modules()
        if isinstance(module, nn.Linear) and name not in readers and module.out_features == hidden
    )
    value, output, reason = _value_output(linears, attention)
    return LayerRoles(readers, writers, value, output, reason)


def _params(layer: nn.Module, rel: str) -> list[str]:
    module = layer.get_submodule(rel)
    return [p for p in ("weight", "bias") if module._parameters.get(p) is not None]


def layer_plan(layer: nn.Module, prefix: str, roles: LayerRoles, *, residual: bool, heads: bool) -> Plan:
    """Full tensor name -> steps for one layer (``residual``: the residual rotation and norm folds; ``heads``:
    the per-head value/output rotation)."""
    steps: dict[str, list[Step]] = {}

    def add(rel: str, param: str, step: Step) -> None:
        steps.setdefault(f"{prefix}.{rel}.{param}", []).append(step)

    if residual:
        for rel, norm in roles.readers.items():
            add(rel, "weight", Step(READ, f"{prefix}.{norm}.weight"))
        for norm in sorted(set(roles.readers.values())):
            add(norm, "weight", Step(IDENTITY))
        for rel in roles.writers:
            for param in _params(layer, rel):
                add(rel, param, Step(WRITE))
    if heads and roles.value is not None and roles.output is not None:
        for param in _params(layer, roles.value):
            add(roles.value, param, Step(VALUE_HEADS))
        add(roles.output, "weight", Step(OUTPUT_HEADS))
    return {name: tuple(found) for name, found in steps.items()}


def final_norm(model: nn.Module, layers_path: str, hidden: int, embed_weight: str) -> str | None:
    """Dotted name of the one module beside the decoder layers (a sibling of their container, or a child of the
    root) with a hidden-size 1-D ``weight`` (``model.norm``); None when there is not exactly one."""
    parent = layers_path.rpartition(".")[0]
    embed = embed_weight.rpartition(".")[0]
    scopes = {parent, ""}
    found = []
    for name, module in model.named_modules():
        if name.rpartition(".")[0] not in scopes or name in (layers_path, embed) or not name:
            continue
        weight = module._parameters.get("weight")
        if weight is not None and weight.dim() == 1 and int(weight.shape[0]) == hidden:
            found.append(name)
    return found[0] if len(found) == 1 else None


def base_plan(embed_weight: str, head_weight: str, norm: str | None) -> Plan:
    """The steps outside the layers: ``E -> E Q``, the final norm folded into the output projection."""
    plan: Plan = {embed_weight: (Step(EMBED),)}
    if norm is not None:
        plan[f"{norm}.weight"] = (Step(IDENTITY),)
    plan[head_weight] = (Step(READ, f"{norm}.weight" if norm is not None else None),)
    return plan
