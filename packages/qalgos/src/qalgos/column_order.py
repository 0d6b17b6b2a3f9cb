"""The order in which GPTQ visits input columns, and the group each visited column belongs to.

Three orderings exist:

* natural: columns in order; group of column ``i`` is ``i // group_size``.
* ``desc_act``: columns by descending Hessian diagonal; groups are formed in *that* order (the permuted
  position ``j`` belongs to group ``j // group_size``), unless ``static_groups`` keeps natural groups.
* ``act_group_aware``: natural groups are kept, but visited one whole group at a time, full groups by
  descending maximum diagonal and columns inside a full group by descending diagonal; a partial last
  group (``in`` not a multiple of the group size) is visited last, in natural order, as the reference
  (GPT-QModel 7.7.0) does.

In every case the group map saved with the weight is ``g_idx[perm[j]] = group_of[j]``. Sorting is stable,
so ties keep the natural order and the plan is deterministic.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from .spec import QuantSpec


@dataclass(frozen=True)
class ColumnPlan:
    """``perm [in]`` int64: visited position -> original column; ``group_of [in]`` int64: group of each
    visited position; ``segments``: maximal runs ``(start, end, group)`` of visited positions sharing a
    group; ``dynamic``: whether group parameters are computed when a segment starts (False for static
    groups and per-channel quantization, whose parameters are computed before the solve)."""

    perm: torch.Tensor
    group_of: torch.Tensor
    segments: tuple[tuple[int, int, int], ...]
    dynamic: bool

    def g_idx(self) -> torch.Tensor:
        """int32 ``[in]`` group index of every original column."""
        out = torch.empty_like(self.group_of)
        out[self.perm] = self.group_of
        return out.to(torch.int32)

    def is_identity(self) -> bool:
        return bool(torch.equal(self.perm, torch.arange(self.perm.numel())))


def _gar_perm(diag: torch.Tensor, width: int) -> torch.Tensor:
    in_ = diag.numel()
    full = in_ // width
    blocks = diag[: full * width].reshape(full, width)
    local = torch.argsort(blocks, dim=1, descending=True, stable=True)
    order = torch.argsort(blocks.amax(dim=1), descending=True, stable=True)
    perm = (local + torch.arange(full, dtype=torch.int64)[:, None] * width)[order].reshape(-1)
    return torch.cat([perm, torch.arange(full * width, in_, dtype=torch.int64)])


def _segments(group_of: torch.Tensor) -> tuple[tuple[int, int, int], ...]:
    values = group_of.tolist()
    out = []
    start = 0
    for j in range(1, len(values) + 1):
        if j == len(values) or values[j] != values[start]:
            out.append((start, j, values[start]))
            start = j
    return tuple(out)


def plan_columns(diag: torch.Tensor, spec: QuantSpec) -> ColumnPlan:
    """The visiting order for a Hessian diagonal ``diag [in]`` under ``spec``."""
    in_ = diag.numel()
    width = spec.group_width(in_)
    natural = torch.arange(in_, dtype=torch.int64)
    if spec.desc_act:
        perm = torch.argsort(diag, descending=True, stable=True)
    elif spec.act_group_aware:
        perm = _gar_perm(diag, width)
    else:
        perm = natural
    if spec.group_size == -1:
        group_of = torch.zeros(in_, dtype=torch.int64)
    elif spec.desc_act and not spec.static_groups:
        group_of = natural // width
    else:
        group_of = perm // width
    dynamic = spec.group_size != -1 and not spec.static_groups
    return ColumnPlan(perm, group_of, _segments(group_of), dynamic)


def outer_blocks(plan: ColumnPlan, block_size: int) -> list[tuple[int, int]]:
    """Lazy-update blocks ``(start, end)``. With dynamic groups a block holds whole segments only (a
    segment wider than ``block_size`` is a block of its own), so a group's parameters are always computed
    from fully updated columns."""
    in_ = plan.perm.numel()
    if not plan.dynamic:
        return [(s, min(s + block_size, in_)) for s in range(0, in_, block_size)]
    blocks = []
    start = end = 0
    for seg_start, seg_end, _ in plan.segments:
        if end > start and seg_end - start > block_size:
            blocks.append((start, end))
            start = seg_start
        end = seg_end
    blocks.append((start, end))
    return blocks


def inner_blocks(plan: ColumnPlan, start: int, end: int, width: int) -> list[tuple[int, int]]:
    """Sub-blocks of ``[start, end)`` at most ``width`` wide, cut at every dynamic segment start."""
    cuts = {start, end}
    if plan.dynamic:
        cuts.update(s for s, _, _ in plan.segments if start < s < end)
    edges = sorted(cuts)
    out: list[tuple[int, int]] = []
    for a, b in itertools.pairwise(edges):
        out.extend((s, min(s + width, b)) for s in range(a, b, width))
    return out
