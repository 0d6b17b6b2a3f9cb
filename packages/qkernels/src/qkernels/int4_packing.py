"""Runtime 4-bit packings of a logical weight for the Triton kernels (torch, CPU, int32 words).

These are kernel runtime forms, built from the logical codes at load; the module's checkpoint tensors
are kept separately and unchanged. Widths that are not a multiple of 8 are zero-padded.
"""

from __future__ import annotations

import torch

_GPTQ_SLOT = torch.arange(8)  # value j sits in nibble slot j
_AWQ_SLOT = torch.tensor([(j >> 1) + 4 * (j & 1) for j in range(8)])  # AWQ order map [0,2,4,6,1,3,5,7] inverted


def _words(nibbles: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """``[..., 8]`` values in [0, 15] -> ``[...]`` int32 words with value j at bits ``4 * slots[j]``."""
    w = (nibbles.to(torch.int64) << (4 * slots).to(torch.int64)).sum(-1)
    w = torch.where(w >= 2**31, w - 2**32, w)
    return w.to(torch.int32)


def _pad_last(t: torch.Tensor, multiple: int) -> torch.Tensor:
    extra = -t.shape[-1] % multiple
    return torch.nn.functional.pad(t, (0, extra)) if extra else t


def pack_rows_gptq(codes_t: torch.Tensor) -> torch.Tensor:
    """``[K, N]`` codes -> ``[ceil(K/8), N]`` int32, row k at bits ``4 * (k % 8)`` of word ``k // 8``."""
    padded = _pad_last(codes_t.T, 8)  # [N, K8]
    n, k8 = padded.shape
    return _words(padded.reshape(n, k8 // 8, 8), _GPTQ_SLOT).T.contiguous()


def pack_cols(values: torch.Tensor, *, awq_order: bool) -> torch.Tensor:
    """``[R, N]`` -> ``[R, ceil(N/8)]`` int32 along columns (plain nibble order, or the AWQ order map)."""
    padded = _pad_last(values, 8)
    r, n8 = padded.shape
    return _words(padded.reshape(r, n8 // 8, 8), _AWQ_SLOT if awq_order else _GPTQ_SLOT).contiguous()
