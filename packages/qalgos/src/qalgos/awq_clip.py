"""AWQ clipping search: per output channel and group, the weight range that best preserves outputs.

For a (scaled) weight ``[out, in]`` and its input activations ``x [tokens, in]``, each group's range is
shrunk to ``absmax * (1 - i / grid)`` for ``i < max_shrink * grid``; weights are clamped to ± that value
and pseudo-quantized with the AWQ formulas, and the candidate whose per-group output contribution
``x_g · q_g`` has the smallest mean squared error against ``x_g · w_g`` over (at most 512 sampled)
tokens wins. Layers whose name marks a query or key projection are not clipped.
"""

from __future__ import annotations

import torch

from .errors import ShapeError
from .group_params import awq_codes_
from .result import check_weight
from .scratch_buffers import ScratchBuffers
from .spec import QuantSpec

CLIP_SKIP_MARKERS = ("q_", "k_", "query", "key", "Wqkv")


def clip_allowed(name: str) -> bool:
    """False for query/key projections (names containing ``q_``, ``k_``, ``query``, ``key`` or ``Wqkv``)."""
    return not any(marker in name for marker in CLIP_SKIP_MARKERS)


def _pseudo_quant_rows_(w: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    """AWQ fake quantization of every row of ``w [rows, n]`` as one group, written into ``w`` (a scratch
    tensor): ``codes_of`` then ``dequant_of``'s operations in their order, so their values."""
    scale, zero = awq_codes_(w, spec)
    return w.sub_(zero[:, None]).mul_(scale[:, None])


def _search_part(
    w: torch.Tensor, x: torch.Tensor, spec: QuantSpec, grid: int, max_shrink: float, scratch: ScratchBuffers
) -> torch.Tensor:
    """Best max values ``[out, Gp]`` for ``w [out, Gp, n]`` and ``x [tokens, Gp, n]``.

    Output rows go in batches of 256 (64 when ``out`` is not a multiple of 256). The clipped candidate
    ``[ob, Gp, n]``, the reference product and the candidate's product ``[Gp, tokens, ob]`` are ``scratch``
    tensors rewritten by every batch and shrink step (``out=`` and in-place operations: the values of the fresh
    tensors they replace; fresh ones per step made a 14336-row weight's search fault in about 3 GB of new pages)."""
    out, groups, width = w.shape
    xg = x.permute(1, 0, 2).contiguous()  # [Gp, t, n]
    tokens = xg.shape[1]
    batch = 256 if out % 256 == 0 else 64
    best_all = torch.empty(out, groups, dtype=torch.float32, device=w.device)
    for o0 in range(0, out, batch):
        wb = w[o0 : o0 + batch]  # [ob, Gp, n]
        rows = wb.shape[0]
        products = (groups, tokens, rows)
        reference = torch.bmm(xg, wb.permute(1, 2, 0), out=scratch.take("reference", products, torch.float32, w.device))
        org_max = wb.abs().amax(dim=2)  # [ob, Gp]
        best = org_max.clone()
        min_err = torch.full((rows, groups), float("inf"), device=w.device)
        for i in range(int(max_shrink * grid)):
            max_val = org_max * (1 - i / grid)
            clipped = scratch.take("clipped", (rows, groups, width), w.dtype, w.device)
            torch.clamp(wb, -max_val[..., None], max_val[..., None], out=clipped)
            q = _pseudo_quant_rows_(clipped.view(rows * groups, width), spec).view(rows, groups, width)
            product = torch.bmm(xg, q.permute(1, 2, 0), out=scratch.take("product", products, torch.float32, w.device))
            err = product.sub_(reference).square_().mean(dim=1).T  # [ob, Gp]
            better = err < min_err
            min_err = torch.where(better, err, min_err)
            best = torch.where(better, max_val, best)
        best_all[o0 : o0 + rows] = best
    return best_all


def search_clip(
    weight: torch.Tensor,
    x: torch.Tensor,
    spec: QuantSpec,
    grid: int = 20,
    max_shrink: float = 0.5,
    max_tokens: int = 512,
    scratch: ScratchBuffers | None = None,
) -> torch.Tensor:
    """Best clipping maxima ``[out, G]`` float32 for ``weight [out, in]`` given inputs ``x [..., in]``.

    Tokens are subsampled with a fixed stride to at most about ``max_tokens``; the search runs in float32.
    ``scratch``: where its per-step temporaries live (default: a new :class:`ScratchBuffers`, dropped at the end).
    """
    check_weight(weight)
    scratch = scratch or ScratchBuffers()
    out, in_ = weight.shape
    x = x.detach().reshape(-1, in_).to(torch.float32)
    step = max(1, x.shape[0] // max_tokens)
    x = x[::step]
    w = weight.detach().to(torch.float32)
    width = spec.group_width(in_)
    full = in_ // width
    parts = []
    if full:
        cols = full * width
        w_full = w[:, :cols].reshape(out, full, width)
        x_full = x[:, :cols].reshape(-1, full, width)
        parts.append(_search_part(w_full, x_full, spec, grid, max_shrink, scratch))
    if full * width < in_:
        tail = slice(full * width, in_)
        parts.append(_search_part(w[:, tail][:, None, :], x[:, tail][:, None, :], spec, grid, max_shrink, scratch))
    return torch.cat(parts, dim=1)


def apply_clip(weight: torch.Tensor, clip: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    """``weight [out, in]`` with every group clamped to ``±clip[o, g]`` (``clip: [out, G]``), as float32."""
    out, in_ = weight.shape
    if tuple(clip.shape) != (out, spec.groups(in_)):
        raise ShapeError(f"clip: expected [out, G] = {(out, spec.groups(in_))}, found {tuple(clip.shape)}")
    g_idx = torch.arange(in_, device=clip.device) // spec.group_width(in_)
    bound = clip.to(torch.float32)[:, g_idx].to(weight.device)
    return torch.clamp(weight.to(torch.float32), -bound, bound)
