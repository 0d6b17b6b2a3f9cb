"""torch views of FP8 codes (imports torch lazily; the rest of qformats never imports it)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .formats import fp8_format


def to_torch(codes: np.ndarray, format: str) -> Any:
    """uint8 codes -> a torch tensor of the matching float8 dtype (shares memory with a copy of codes)."""
    import torch

    name = fp8_format(format).name
    return torch.from_numpy(np.ascontiguousarray(codes, dtype=np.uint8).copy()).view(getattr(torch, name))


def from_torch(tensor: Any) -> tuple[np.ndarray, str]:
    """A torch float8 tensor -> (uint8 codes, format name)."""
    import torch

    name = str(tensor.dtype).removeprefix("torch.")
    fp8_format(name)
    return tensor.detach().cpu().contiguous().view(torch.uint8).numpy().copy(), name
