"""The arithmetic of a folded rotation, one tensor at a time, in float64.

Row-vector convention (``y = x Wᵀ + b``, ``W`` ``[out, in]``): the residual stream ``h`` becomes ``h Q``. A
reader computes ``norm(h Q) (W diag(s) Q)ᵀ = norm(h) diag(s) Wᵀ`` (an RMS norm commutes with ``Q``); a writer
adds ``(x Wᵀ + b) Q``, i.e. ``W -> Qᵀ W``, ``b -> Qᵀ b``. Per head, values ``v_h -> v_h H`` pass through the
attention's per-head mixing unchanged and ``o_proj`` undoes them with ``W_h -> W_h H``. Steps of
:mod:`qhf.rotation.plan`; :class:`FoldedRotation` is the :class:`~qhf.source.opened_source.TensorTransform` a
source reads through.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..errors import QHFError
from .plan import EMBED, IDENTITY, OUTPUT_HEADS, READ, VALUE_HEADS, WRITE, Plan, Step

Read = Callable[[str], torch.Tensor]


@dataclass
class FoldedRotation:
    """``plan`` (full tensor name -> steps), the residual rotation ``residual`` ``[hidden, hidden]`` and the head
    rotation ``head`` ``[head_dim, head_dim]`` (float64; None where unused), the norms' ``offset``."""

    plan: Plan
    residual: torch.Tensor | None
    head: torch.Tensor | None
    offset: float = 0.0

    def __contains__(self, name: object) -> bool:
        return name in self.plan

    def __call__(self, name: str, read: Read) -> torch.Tensor:
        """The rewritten float64 tensor ``name``; ``read(name)`` gives any untransformed tensor."""
        value = read(name).to(torch.float64)
        for step in self.plan[name]:
            value = self._apply(name, step, value, read)
        return value

    def _matrix(self, name: str, which: str) -> torch.Tensor:
        matrix = self.residual if which == "residual" else self.head
        if matrix is None:
            raise QHFError(f"rotation of {name}: the plan needs the {which} rotation, which was not built")
        return matrix

    def _apply(self, name: str, step: Step, value: torch.Tensor, read: Read) -> torch.Tensor:
        if step.kind == IDENTITY:
            return torch.full_like(value, 1.0 - self.offset)
        if step.kind == EMBED:
            return value @ self._matrix(name, "residual")
        if step.kind == READ:
            if step.norm is not None:
                value = value * (self.offset + read(step.norm).to(torch.float64))
            return value @ self._matrix(name, "residual")
        if step.kind == WRITE:
            q = self._matrix(name, "residual")
            return q.T @ value if value.dim() == 2 else value @ q
        h = self._matrix(name, "head")
        d = h.shape[0]
        if step.kind == VALUE_HEADS:  # rows per KV head: W_h -> Hᵀ W_h, b_h -> Hᵀ b_h
            if value.dim() == 1:
                return (value.reshape(-1, d) @ h).reshape(value.shape)
            return (h.T @ value.reshape(-1, d, value.shape[1])).reshape(value.shape)
        if step.kind == OUTPUT_HEADS:  # columns per head: W_h -> W_h H
            return (value.reshape(value.shape[0], -1, d) @ h).reshape(value.shape)
        raise QHFError(f"rotation of {name}: unknown step {step.kind!r}")
