"""AWQ's clip search and quantization written into reused scratch tensors give the bits of the formulations
they replaced (kept here as the oracle: a fresh tensor per group and per shrink step)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
from qalgos.awq import grid_scales, grid_trial, quantize_awq, search_scales, search_statistics
from qalgos.awq_clip import _pseudo_quant_rows_, apply_clip, search_clip
from qalgos.awq_gram import gram_matrix, gram_output_mse, reduced_output_mse
from qalgos.group_params import awq_params, finish_scale
from qalgos.result import build_logical, stored_dequantized
from qalgos.rtn import natural_g_idx, quantize_groups
from qalgos.scratch_buffers import ScratchBuffers
from qalgos.spec import QuantSpec


def _search_part_fresh(w: torch.Tensor, x: torch.Tensor, spec: QuantSpec, grid: int, max_shrink: float) -> torch.Tensor:
    """The clip search's batch loop as it was: new tensors for every candidate."""
    out, groups, width = w.shape
    xg = x.permute(1, 0, 2).contiguous()
    batch = 256 if out % 256 == 0 else 64
    best_all = torch.empty(out, groups, dtype=torch.float32)
    for o0 in range(0, out, batch):
        wb = w[o0 : o0 + batch]
        rows = wb.shape[0]
        reference = torch.bmm(xg, wb.permute(1, 2, 0))
        org_max = wb.abs().amax(dim=2)
        best = org_max.clone()
        min_err = torch.full((rows, groups), float("inf"))
        for i in range(int(max_shrink * grid)):
            max_val = org_max * (1 - i / grid)
            clipped = torch.clamp(wb, -max_val[..., None], max_val[..., None])
            q = _pseudo_quant_rows_(clipped.reshape(rows * groups, width), spec).reshape(rows, groups, width)
            diff = torch.bmm(xg, q.permute(1, 2, 0)) - reference
            err = diff.square().mean(dim=1).T
            better = err < min_err
            min_err = torch.where(better, err, min_err)
            best = torch.where(better, max_val, best)
        best_all[o0 : o0 + rows] = best
    return best_all


def _search_clip_fresh(weight: torch.Tensor, x: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    out, in_ = weight.shape
    x = x.reshape(-1, in_).to(torch.float32)
    x = x[:: max(1, x.shape[0] // 512)]
    w = weight.to(torch.float32)
    width = spec.group_width(in_)
    full = in_ // width
    parts = []
    if full:
        cols = full * width
        parts.append(
            _search_part_fresh(
                w[:, :cols].reshape(out, full, width), x[:, :cols].reshape(-1, full, width), spec, 20, 0.5
            )
        )
    if full * width < in_:
        tail = slice(full * width, in_)
        parts.append(_search_part_fresh(w[:, tail][:, None, :], x[:, tail][:, None, :], spec, 20, 0.5))
    return torch.cat(parts, dim=1)


def _quantize_awq_fresh(weight: torch.Tensor, spec: QuantSpec, clip: torch.Tensor | None):
    w = weight.detach().to(torch.float32)
    source = apply_clip(w, clip, spec) if clip is not None else w
    codes, scales, zeros, _ = quantize_groups(source, spec, awq_params)
    logical = build_logical(codes, scales, zeros, natural_g_idx(w.shape[1], spec), spec, {"algorithm": "awq"})
    deq = stored_dequantized(logical, w)
    return logical, deq.to(weight.dtype), float(((deq - w) ** 2).mean())


CASES = [
    (512, 256, QuantSpec(bits=4, group_size=128, desc_act=False, act_group_aware=False), torch.float32),
    (
        300,
        96,
        QuantSpec(bits=3, group_size=32, desc_act=False, act_group_aware=False),
        torch.float32,
    ),  # 64-row batches, a short last one
    (
        130,
        100,
        QuantSpec(bits=4, group_size=32, sym=False, desc_act=False, act_group_aware=False),
        torch.bfloat16,
    ),  # partial group
    (256, 192, QuantSpec(bits=4, group_size=64, sym=False, desc_act=False, act_group_aware=False), torch.bfloat16),
]


@pytest.mark.parametrize(("out", "in_", "spec", "dtype"), CASES)
def test_scratch_clip_search_and_quantization_keep_the_bits(
    out: int, in_: int, spec: QuantSpec, dtype: torch.dtype
) -> None:
    gen = torch.Generator().manual_seed(out + in_)
    w = torch.randn(out, in_, generator=gen)
    w[torch.rand(out, in_, generator=gen) < 0.02] *= 8
    w = w.to(dtype)
    x = torch.randn(700, in_, generator=gen) * torch.rand(in_, generator=gen) * 3
    clip = search_clip(w, x, spec)
    torch.testing.assert_close(clip, _search_clip_fresh(w, x, spec), rtol=0, atol=0)
    for bound in (None, clip):
        result = quantize_awq(w, spec, clip=bound)
        logical, deq, loss = _quantize_awq_fresh(w, spec, bound)
        for field in ("codes", "scales", "zeros", "g_idx"):
            np.testing.assert_array_equal(getattr(result.weight, field), getattr(logical, field))
            assert getattr(result.weight, field).flags.c_contiguous
        assert torch.equal(result.dequantized, deq) and result.dequantized.dtype == dtype
        assert result.loss == loss


def test_quantize_awq_of_a_transposed_view_keeps_the_bits() -> None:
    w = torch.randn(128, 64, generator=torch.Generator().manual_seed(6)).T  # [64, 128], not contiguous
    spec = QuantSpec(bits=4, group_size=32, desc_act=False, act_group_aware=False)
    for bound in (None, torch.full((64, 4), 0.7)):
        result = quantize_awq(w, spec, clip=bound)
        logical, deq, loss = _quantize_awq_fresh(w, spec, bound)
        np.testing.assert_array_equal(result.weight.codes, logical.codes)
        assert torch.equal(result.dequantized, deq) and result.loss == loss


def test_quantize_awq_leaves_a_float32_weight_unchanged() -> None:
    w = torch.randn(64, 128, generator=torch.Generator().manual_seed(5))
    before = w.clone()
    spec = QuantSpec(bits=4, group_size=32, desc_act=False, act_group_aware=False)
    quantize_awq(w, spec, clip=torch.full((64, 4), 0.5))
    assert torch.equal(w, before)


def _reduced_output_mse_fresh(operand, form, tokens, weights, trial) -> float:
    """The reduced-precision search loss as it was: fresh tensors for D, its rounding and the products."""
    total, outputs = 0.0, 0
    for wj, tj in zip(weights, trial, strict=True):
        diff = wj.to(torch.float32) - tj.to(torch.float32)
        low = diff.to(operand.dtype)
        if form == "gram":
            product = (low @ operand).to(torch.float32).mul_(diff)
        else:
            product = (operand @ low.T).to(torch.float32).square_()
        total += float(product.sum(dtype=torch.float64))
        outputs += int(wj.shape[0])
    return total / (tokens * outputs)


def test_scratch_trials_and_reduced_losses_keep_the_bits() -> None:
    gen = torch.Generator().manual_seed(11)
    spec = QuantSpec(bits=4, group_size=32, desc_act=False, act_group_aware=False)
    weights = [
        torch.randn(96, 128, generator=gen),
        torch.randn(32, 128, generator=gen),
        torch.randn(64, 128, generator=gen),
    ]
    scratch = ScratchBuffers()
    for tokens in (80, 300):  # the "rows" form (tokens < in), then the Gram form
        x = torch.randn(tokens, 128, generator=gen) * torch.rand(128, generator=gen) * 4
        x_mean, w_mean = search_statistics(x, weights, spec)
        gram = gram_matrix(x)
        for operand, form in (
            (x, "rows"),
            (gram.to(torch.float32), "gram"),
            (x.to(torch.bfloat16), "rows"),
            (gram.to(torch.bfloat16), "gram"),
        ):
            for ratio in (0.0, 0.35, 0.9):
                scales = grid_scales(x_mean, w_mean, ratio)
                fresh = grid_trial(weights, scales, spec)
                reused = grid_trial(weights, scales, spec, scratch)
                assert all(torch.equal(a, b) for a, b in zip(fresh, reused, strict=True))
                expected = _reduced_output_mse_fresh(operand, form, tokens, weights, fresh)
                assert reduced_output_mse(operand, form, tokens, weights, reused, scratch) == expected
    assert scratch.nbytes() > 0
    scratch.release()
    assert scratch.nbytes() == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_forward_form_search_with_scratch_keeps_every_ratios_loss(dtype: torch.dtype) -> None:
    """The inspected-block search with its trials and loss difference in scratch tensors: every ratio's
    output, the chosen ratio, scales and loss equal those of fresh temporaries. The block copies each trial
    into its own weights (converting to ``dtype``), as qlooper's AWQ processor does."""
    gen = torch.Generator().manual_seed(13)
    spec = QuantSpec(bits=4, group_size=32, desc_act=False, act_group_aware=False)
    gate, up = torch.randn(96, 64, generator=gen), torch.randn(96, 64, generator=gen)
    down = torch.randn(64, 96, generator=gen).to(dtype)
    x = (torch.randn(150, 64, generator=gen) * torch.rand(64, generator=gen) * 3).to(dtype)

    def block(outputs: list[torch.Tensor]) -> Callable[[list[torch.Tensor]], torch.Tensor]:
        held = [torch.empty(96, 64, dtype=dtype), torch.empty(96, 64, dtype=dtype)]

        def forward_with(trial: list[torch.Tensor]) -> torch.Tensor:
            for mine, w in zip(held, trial, strict=True):
                mine.copy_(w)
            out = (torch.nn.functional.silu(x @ held[0].T) * (x @ held[1].T)) @ down.T
            outputs.append(out.clone())
            return out.to(torch.float32)

        return forward_with

    fresh_outputs: list[torch.Tensor] = []
    reused_outputs: list[torch.Tensor] = []
    fresh = search_scales(x, [gate, up], block(fresh_outputs), spec)
    reused = search_scales(x, [gate, up], block(reused_outputs), spec, scratch=ScratchBuffers())
    assert len(fresh_outputs) == len(reused_outputs) == 21
    assert all(torch.equal(a, b) for a, b in zip(fresh_outputs, reused_outputs, strict=True))
    assert (reused.ratio, reused.loss) == (fresh.ratio, fresh.loss)
    assert torch.equal(reused.scales, fresh.scales)


def test_scratch_buffers_reuse_and_regrow() -> None:
    scratch = ScratchBuffers()
    a = scratch.take("x", (4, 8), torch.float32)
    b = scratch.take("x", (2, 8), torch.float32)
    assert b.data_ptr() == a.data_ptr() and b.shape == (2, 8) and b.is_contiguous()
    c = scratch.take("x", (8, 8), torch.float32)  # larger: a new tensor
    assert c.shape == (8, 8) and scratch.nbytes() == 8 * 8 * 4
    d = scratch.take("x", (8, 8), torch.bfloat16)  # another dtype: a new tensor
    assert d.dtype == torch.bfloat16 and scratch.nbytes() == 8 * 8 * 2


def test_scratch_float64_loss_keeps_the_bits() -> None:
    gen = torch.Generator().manual_seed(12)
    weights = [torch.randn(48, 64, generator=gen), torch.randn(16, 64, generator=gen)]
    trial = [w + 0.01 * torch.randn(w.shape, generator=gen) for w in weights]
    gram = gram_matrix(torch.randn(200, 64, generator=gen))
    total = torch.zeros((), dtype=torch.float64)
    for wj, tj in zip(weights, trial, strict=True):
        diff = wj.to(torch.float64) - tj.to(torch.float64)
        total += ((diff @ gram) * diff).sum()
    expected = float(total / (200 * 64))
    scratch = ScratchBuffers()
    assert gram_output_mse(gram, 200, weights, trial, scratch) == expected
    assert gram_output_mse(gram, 200, weights, trial) == expected


@pytest.mark.parametrize("sym", [True, False])
def test_awq_params_without_an_abs_copy_keep_the_bits(sym: bool) -> None:
    gen = torch.Generator().manual_seed(13)
    x = torch.randn(40, 32, generator=gen)
    x[3] = 0.0
    x[4] = -0.0
    x[5, :16] = -0.0
    x[6] = -2.5  # one-signed rows
    x[7] = 1e-7
    spec = QuantSpec(bits=4, group_size=32, sym=sym, desc_act=False, act_group_aware=False)
    scale, zero = awq_params(x, spec)
    if sym:  # the formulas as they were: max |x| through an |x| copy
        want_scale = finish_scale(x.abs().amax(dim=1).clamp(min=1e-5) / 7, spec)
        want_zero = torch.full_like(want_scale, 8.0)
    else:
        xmax, xmin = x.amax(dim=1), x.amin(dim=1)
        want_scale = finish_scale((xmax - xmin).clamp(min=1e-5) / spec.maxq, spec)
        want_zero = torch.clamp(-torch.round(xmin / want_scale), 0, spec.maxq)
    assert torch.equal(scale, want_scale) and torch.equal(zero, want_zero)
    assert torch.equal(torch.signbit(scale), torch.signbit(want_scale))
