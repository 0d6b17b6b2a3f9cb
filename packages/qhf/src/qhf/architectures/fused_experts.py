"""Fused 3-D MoE experts unfused into one small MLP of ``nn.Linear`` per expert.

Recent transformers store a MoE block's experts as two 3-D parameters of one module (classes decorated
with ``use_experts_implementation``): ``gate_up_proj`` ``[E, 2I, H]`` (or ``[E, H, 2I]`` when transposed;
gate and up halves concatenated, or interleaved gate/up/gate/up) and ``down_proj`` ``[E, H, I]``, with
optional biases ``[E, 2I]`` / ``[E, H]``. GPTQ and AWQ quantize ``[out, in]`` linears one by one, so
:func:`unfuse_experts` swaps every such module for an :class:`UnfusedExperts`: a container whose children
``0 … E-1`` each hold ``gate_proj`` ``[I, H]``, ``up_proj`` ``[I, H]`` and ``down_proj`` ``[H, I]``
(``nn.Linear``), so definitions name them ``mlp.experts.#.gate_proj``. Its forward is the eager expert
loop of transformers with the per-expert linears in place of the 3-D slices; the gate is combined by the
original module's own ``_apply_gate`` (GPT-OSS' clamped SwiGLU included), so the numbers are the same.
:func:`fused_slices` gives, per unfused parameter, where it lives in the fused tensors (for reading a
source that stores them fused). Model discovery checks each unfused block against the fused one on
random weights before any work (:mod:`qhf.architectures.discovery`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..errors import UnsupportedArchitectureError

_FLAGS = ("has_gate", "has_bias", "is_transposed", "is_concatenated")


def is_fused_experts(module: nn.Module) -> bool:
    """Whether ``module`` is a transformers experts module storing its weights as 3-D parameters."""
    down = module._parameters.get("down_proj")
    return all(hasattr(module, flag) for flag in _FLAGS) and isinstance(down, torch.Tensor) and down.dim() == 3


@dataclass(frozen=True)
class FusedSlice:
    """Where an unfused parameter lives in a fused tensor: ``fused[expert]``, then ``half`` of the gate/up
    axis (``0`` gate, ``1`` up, ``None`` whole), interleaved or concatenated, transposed when stored ``[in, out]``."""

    fused_name: str
    expert: int
    half: int | None
    interleaved: bool
    transposed: bool

    def _view(self, fused: torch.Tensor) -> torch.Tensor:
        part = fused[self.expert]
        if part.dim() == 2 and self.transposed:
            part = part.T
        if self.half is not None:
            part = part[self.half :: 2] if self.interleaved else part.chunk(2, dim=0)[self.half]
        return part

    def take(self, fused: torch.Tensor) -> torch.Tensor:
        """The unfused parameter (``[out, in]`` weight or ``[out]`` bias) from the fused tensor."""
        return self._view(fused).contiguous()

    def put(self, fused: torch.Tensor, value: torch.Tensor) -> None:
        """Write the unfused parameter ``value`` back into its place in ``fused`` (inverse of :meth:`take`)."""
        with torch.no_grad():
            self._view(fused).copy_(value)


class ExpertMLP(nn.Module):
    """One expert: ``down_proj(gate(gate_proj(x), up_proj(x)))`` (``gate_proj`` absent for ungated experts)."""

    def __init__(self, hidden: int, inner: int, *, gated: bool, bias: bool, dtype: torch.dtype, device: Any) -> None:
        super().__init__()
        if gated:
            self.gate_proj = nn.Linear(hidden, inner, bias=bias, dtype=dtype, device=device)
        self.up_proj = nn.Linear(hidden, inner, bias=bias, dtype=dtype, device=device)
        self.down_proj = nn.Linear(inner, hidden, bias=bias, dtype=dtype, device=device)


class UnfusedExperts(nn.Module):
    """Experts ``0 … E-1`` as :class:`ExpertMLP` children; called like the fused module it replaced:
    ``forward(hidden_states [T, H], top_k_index [T, k], top_k_weights [T, k]) -> [T, H]``."""

    _gate_owner: nn.Module  # the fused module (set past nn.Module's registry: it is not a child)

    def __init__(
        self, fused: nn.Module, experts: list[ExpertMLP], slices: dict[str, FusedSlice], shapes: dict[str, Any]
    ) -> None:
        super().__init__()
        for index, expert in enumerate(experts):
            self.add_module(str(index), expert)
        self.num_experts = len(experts)
        self.slices = slices  # unfused parameter (relative name) -> where it lives in the fused tensors
        self.fused_shapes = shapes  # fused parameter name -> its shape
        self.dtype = next(experts[0].parameters()).dtype
        self.gated = bool(fused.has_gate)
        self.interleaved = not bool(fused.is_concatenated)
        # The fused module (its 3-D parameters removed) keeps act_fn and _apply_gate's constants.
        object.__setattr__(self, "_gate_owner", fused)

    def _activate(self, expert: ExpertMLP, x: torch.Tensor) -> torch.Tensor:
        owner = self._gate_owner
        if not self.gated:
            return owner.act_fn(expert.up_proj(x))  # type: ignore[no-any-return,operator]  # transformers' act_fn
        gate = expert.gate_proj(x)
        up = expert.up_proj(x)
        if self.interleaved:
            gate_up = torch.stack((gate, up), dim=-1).flatten(-2)
        else:
            gate_up = torch.cat((gate, up), dim=-1)
        return owner._apply_gate(gate_up)  # type: ignore[no-any-return,operator]  # transformers' gate

    def forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor) -> Any:
        final = torch.zeros_like(hidden_states)
        with torch.no_grad():
            hit = torch.nn.functional.one_hot(top_k_index, num_classes=self.num_experts + 1).permute(2, 1, 0)
            experts_hit = torch.greater(hit.sum(dim=(-1, -2)), 0).nonzero()
        for row in experts_hit:
            index = int(row[0])
            if index == self.num_experts:
                continue
            top_k_pos, token_idx = torch.where(hit[index])
            expert = self._modules[str(index)]
            out = expert.down_proj(self._activate(expert, hidden_states[token_idx]))  # type: ignore[union-attr,arg-type,operator]
            out = out * top_k_weights[token_idx, top_k_pos, None]
            final.index_add_(0, token_idx, out.to(final.dtype))
        return final


def _parts(fused: nn.Module, name: str) -> list[tuple[str, str, int | None]]:
    """``(unfused child, fused parameter, half)`` for each weight/bias of one expert."""
    parts: list[tuple[str, str, int | None]] = [("down_proj", "down_proj", None)]
    if fused.has_gate:
        parts += [("gate_proj", "gate_up_proj", 0), ("up_proj", "gate_up_proj", 1)]
    else:
        parts += [("up_proj", "up_proj", None)]
    for _child, param, _half in parts:
        if not isinstance(fused._parameters.get(param), torch.Tensor):
            raise UnsupportedArchitectureError(
                f"experts module {name!r} ({type(fused).__name__}): expected a 3-D parameter {param!r}, found none"
            )
    return parts


def fused_slices(fused: nn.Module, name: str) -> dict[str, FusedSlice]:
    """Unfused parameter name (relative to the experts module, ``3.gate_proj.weight``) -> its fused slice."""
    slices: dict[str, FusedSlice] = {}
    experts = int(fused._parameters["down_proj"].shape[0])  # type: ignore[union-attr]
    for child, param, half in _parts(fused, name):
        suffixes = [("weight", param)] + ([("bias", f"{param}_bias")] if fused.has_bias else [])
        for suffix, fused_name in suffixes:
            for expert in range(experts):
                slices[f"{expert}.{child}.{suffix}"] = FusedSlice(
                    fused_name, expert, half, not bool(fused.is_concatenated), bool(fused.is_transposed)
                )
    return slices


def unfused_replacement(fused: nn.Module, name: str) -> UnfusedExperts:
    """An :class:`UnfusedExperts` with the fused module's shapes; weights copied when they are real."""
    if getattr(fused, "has_post_expert_norm", False):
        raise UnsupportedArchitectureError(
            f"experts module {name!r} ({type(fused).__name__}): a norm after each expert is not supported"
        )
    slices = fused_slices(fused, name)
    down = fused._parameters["down_proj"]
    experts = int(down.shape[0])  # type: ignore[union-attr]
    hidden, inner = down.shape[1:] if not fused.is_transposed else down.shape[:0:-1]  # type: ignore[union-attr]
    real = down.device.type != "meta"  # type: ignore[union-attr]
    modules = [
        ExpertMLP(
            int(hidden),
            int(inner),
            gated=bool(fused.has_gate),
            bias=bool(fused.has_bias),
            dtype=down.dtype,  # type: ignore[union-attr]
            device=down.device,  # type: ignore[union-attr]
        )
        for _ in range(experts)
    ]
    shapes = {where.fused_name: tuple(fused._parameters[where.fused_name].shape) for where in slices.values()}  # type: ignore[union-attr]
    unfused = UnfusedExperts(fused, modules, slices, shapes)
    with torch.no_grad():
        for rel, where in slices.items():
            target = unfused.get_parameter(rel)
            if real:
                target.copy_(where.take(fused._parameters[where.fused_name]))  # type: ignore[arg-type]
    for param in {where.fused_name for where in slices.values()}:
        fused._parameters.pop(param, None)
    return unfused


def unfuse_experts(model: nn.Module) -> dict[str, dict[str, FusedSlice]]:
    """Replace every fused experts module of ``model`` in place (see the module docstring).

    Returns, per replaced module's dotted name, :func:`fused_slices` of it (empty when none was fused).
    """
    found = [(name, module) for name, module in model.named_modules() if is_fused_experts(module)]
    replaced: dict[str, dict[str, FusedSlice]] = {}
    for name, module in found:
        replaced[name] = fused_slices(module, name)
        parent_name, _, leaf = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, leaf, unfused_replacement(module, name))
    return replaced
