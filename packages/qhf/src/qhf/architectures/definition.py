"""Model definitions as data: where the decoder layers are and how each one is quantized.

A definition names modules by their dotted path relative to one decoder layer (``self_attn.q_proj``)
or to the model root (``model.embed_tokens``). Nothing here imports transformers or checks class names;
the definition is chosen from ``config.model_type`` alone (see :mod:`qhf.architectures.catalog`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class CalcGroup:
    """One calculation group of a decoder layer, quantized together.

    ``modules``: linear layers (paths relative to the layer) solved in this step.
    ``prev_op``: the module whose output is the group's input (a norm or a linear); AWQ folds the
    group's input scales into it. ``None`` means no scaling is possible for this group.
    ``shared_input``: every module of the group reads the same input tensor (one Hessian serves all).
    ``inspect``: the module whose output AWQ compares while searching scales (``self_attn`` for q/k/v);
    ``None`` compares the group's own outputs.
    """

    modules: tuple[str, ...]
    prev_op: str | None = None
    shared_input: bool = False
    inspect: str | None = None


@dataclass(frozen=True)
class ArchitectureDefinition:
    """Everything the quantization loop needs to know about one architecture family.

    ``layers_path``: dotted path of the ``nn.ModuleList`` of decoder layers (``model.layers``).
    ``groups``: the calculation groups of one layer, in execution order.
    ``run_only``: per-layer modules that run during replay but are never quantized (norms).
    ``base_modules``: modules outside the layers that must be materialized to compute the first
    layer's inputs (embeddings, rotary embedding, final norm).
    ``lm_head``: path of the output projection (not quantized by default).
    ``norm_weight_offset``: the RMSNorm computes ``x * (offset + weight)``; 1.0 for Gemma, else 0.0.
    Folding AWQ scales into such a norm must scale ``offset + weight``, not ``weight``.
    ``shape_dependent_prev``: groups (named by their first module) whose ``prev_op`` is valid only
    when the previous op's output width equals the group's input width (``v_proj`` -> ``o_proj`` under
    grouped-query attention is not).
    """

    name: str
    model_types: tuple[str, ...]
    layers_path: str
    groups: tuple[CalcGroup, ...]
    run_only: tuple[str, ...]
    base_modules: tuple[str, ...]
    lm_head: str = "lm_head"
    norm_weight_offset: float = 0.0
    shape_dependent_prev: tuple[str, ...] = field(default=("self_attn.o_proj",))
    awq_no_clip: tuple[str, ...] = ("self_attn.q_proj", "self_attn.k_proj")

    @property
    def quantized_modules(self) -> tuple[str, ...]:
        """Every quantized module of one layer, in group order."""
        return tuple(name for group in self.groups for name in group.modules)

    def layer_prefix(self, index: int) -> str:
        """Dotted prefix of decoder layer ``index`` (``model.layers.3``)."""
        return f"{self.layers_path}.{index}"

    def without_prev(self, first_module: str) -> ArchitectureDefinition:
        """A copy whose group starting with ``first_module`` has no ``prev_op`` (scaling disabled)."""
        groups = tuple(
            replace(group, prev_op=None) if group.modules[0] == first_module else group for group in self.groups
        )
        return replace(self, groups=groups)
