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

Llama 4's experts (``Llama4TextExperts``) are fused another way, without those flags: ``gate_up_proj``
``[E, H, 2I]`` (gate and up halves concatenated) and ``down_proj`` ``[E, I, H]``, called with the router-scaled
input of every expert stacked (``forward(hidden_states [E*T, H]) -> [E*T, H]``, expert ``e`` reading rows
``e*T … (e+1)*T``) and computing ``down(up * act(gate))``. :class:`UnfusedBatchedExperts` unfuses those; the
same discovery check confirms the reading.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..errors import UnsupportedArchitectureError

_FLAGS = ("has_gate", "has_bias", "is_transposed", "is_concatenated")


@dataclass(frozen=True)
class FusedForm:
    """How a fused experts module stores and calls its experts: gated (``gate_up_proj``) or not, biases,
    stored ``[in, out]`` (``transposed``), gate/up halves concatenated or interleaved, and ``batched`` (Llama 4:
    every expert's rows stacked in one input) or routed (``forward(x, top_k_index, top_k_weights)``)."""

    gated: bool
    bias: bool
    transposed: bool
    concatenated: bool
    batched: bool = False


def _is_3d(module: nn.Module, name: str) -> bool:
    param = module._parameters.get(name)
    return isinstance(param, torch.Tensor) and param.dim() == 3


def fused_form(module: nn.Module) -> FusedForm | None:
    """The :class:`FusedForm` of a transformers experts module with 3-D parameters, ``None`` for any other."""
    if not _is_3d(module, "down_proj"):
        return None
    if all(hasattr(module, flag) for flag in _FLAGS):  # transformers' use_experts_implementation interface
        return FusedForm(
            bool(module.has_gate), bool(module.has_bias), bool(module.is_transposed), bool(module.is_concatenated)
        )
    takes_one_input = len(inspect.signature(module.forward).parameters) == 1
    if _is_3d(module, "gate_up_proj") and hasattr(module, "act_fn") and takes_one_input:
        return FusedForm(gated=True, bias=False, transposed=True, concatenated=True, batched=True)
    return None


def is_fused_experts(module: nn.Module) -> bool:
    """Whether ``module`` is a transformers experts module storing its weights as 3-D parameters."""
    return fused_form(module) is not None


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
        """The unfused parameter (``[out, in]`` weight or ``[out]`` bias) from the fused tensor: always a copy of
        its own (a contiguous slice returned as a view would keep the whole fused tensor alive: an MoE layer's
        128 experts, each read from its own read of ``gate_up_proj``, held 128 of them)."""
        return self._view(fused).clone(memory_format=torch.contiguous_format)

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
        self,
        fused: nn.Module,
        form: FusedForm,
        experts: list[ExpertMLP],
        slices: dict[str, FusedSlice],
        shapes: dict[str, Any],
    ) -> None:
        super().__init__()
        for index, expert in enumerate(experts):
            self.add_module(str(index), expert)
        self.num_experts = len(experts)
        self.slices = slices  # unfused parameter (relative name) -> where it lives in the fused tensors
        self.fused_shapes = shapes  # fused parameter name -> its shape
        self.dtype = next(experts[0].parameters()).dtype
        self.gated = form.gated
        self.interleaved = not form.concatenated
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

    def sample_inputs(self, tokens: int, hidden: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        """Random arguments of :meth:`forward` for ``tokens`` rows (random top-2 routing), for the discovery check."""
        x = torch.randn(tokens, hidden, generator=generator).to(self.dtype)
        k = min(2, self.num_experts)
        scores = torch.rand(tokens, self.num_experts, generator=generator)
        weights, index = scores.topk(k, dim=-1)
        return x, index, weights.to(self.dtype)

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


class UnfusedBatchedExperts(UnfusedExperts):
    """Llama 4's experts unfused (module docstring): ``forward(hidden_states [E*T, H]) -> [E*T, H]``, expert ``e``
    computing ``down_proj(up_proj(x) * act(gate_proj(x)))`` on rows ``e*T … (e+1)*T``."""

    def sample_inputs(self, tokens: int, hidden: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        """Random stacked input of every expert, ``[E * tokens, hidden]``."""
        return (torch.randn(self.num_experts * tokens, hidden, generator=generator).to(self.dtype),)

    def forward(self, hidden_states: torch.Tensor) -> Any:  # type: ignore[override]  # Llama 4's call
        act = self._gate_owner.act_fn
        outputs = []
        for index, rows in enumerate(hidden_states.chunk(self.num_experts, dim=0)):
            expert = self._modules[str(index)]
            gate = act(expert.gate_proj(rows))  # type: ignore[union-attr,operator]  # gate first: the group order
            inner = expert.up_proj(rows) * gate  # type: ignore[union-attr,operator]
            outputs.append(expert.down_proj(inner))  # type: ignore[union-attr,operator]
        return torch.cat(outputs, dim=0)


def _parts(fused: nn.Module, form: FusedForm, name: str) -> list[tuple[str, str, int | None]]:
    """``(unfused child, fused parameter, half)`` for each weight/bias of one expert."""
    parts: list[tuple[str, str, int | None]] = [("down_proj", "down_proj", None)]
    if form.gated:
        parts += [("gate_proj", "gate_up_proj", 0), ("up_proj", "gate_up_proj", 1)]
    else:
        parts += [("up_proj", "up_proj", None)]
    for _child, param, _half in parts:
        if not isinstance(fused._parameters.get(param), torch.Tensor):
            raise UnsupportedArchitectureError(
                f"experts module {name!r} ({type(fused).__name__}): expected a 3-D parameter {param!r}, found none"
            )
    return parts


def fused_slices(fused: nn.Module, name: str, form: FusedForm | None = None) -> dict[str, FusedSlice]:
    """Unfused parameter name (relative to the experts module, ``3.gate_proj.weight``) -> its fused slice."""
    form = form if form is not None else fused_form(fused)
    if form is None:
        raise UnsupportedArchitectureError(f"experts module {name!r} ({type(fused).__name__}): not fused experts")
    slices: dict[str, FusedSlice] = {}
    experts = int(fused._parameters["down_proj"].shape[0])  # type: ignore[union-attr]
    for child, param, half in _parts(fused, form, name):
        suffixes = [("weight", param)] + ([("bias", f"{param}_bias")] if form.bias else [])
        for suffix, fused_name in suffixes:
            for expert in range(experts):
                slices[f"{expert}.{child}.{suffix}"] = FusedSlice(
                    fused_name, expert, half, not form.concatenated, form.transposed
                )
    return slices


def unfused_replacement(fused: nn.Module, name: str) -> UnfusedExperts:
    """An :class:`UnfusedExperts` with the fused module's shapes; weights copied when they are real."""
    if getattr(fused, "has_post_expert_norm", False):
        raise UnsupportedArchitectureError(
            f"experts module {name!r} ({type(fused).__name__}): a norm after each expert is not supported"
        )
    form = fused_form(fused)
    if form is None:
        raise UnsupportedArchitectureError(f"experts module {name!r} ({type(fused).__name__}): not fused experts")
    slices = fused_slices(fused, name, form)
    down = fused._parameters["down_proj"]
    experts = int(down.shape[0])  # type: ignore[union-attr]
    hidden, inner = down.shape[1:] if not form.transposed else down.shape[:0:-1]  # type: ignore[union-attr]
    real = down.device.type != "meta"  # type: ignore[union-attr]
    modules = [
        ExpertMLP(
            int(hidden),
            int(inner),
            gated=form.gated,
            bias=form.bias,
            dtype=down.dtype,  # type: ignore[union-attr]
            device=down.device,  # type: ignore[union-attr]
        )
        for _ in range(experts)
    ]
    shapes = {where.fused_name: tuple(fused._parameters[where.fused_name].shape) for where in slices.values()}  # type: ignore[union-attr]
    kind = UnfusedBatchedExperts if form.batched else UnfusedExperts
    unfused = kind(fused, form, modules, slices, shapes)
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
