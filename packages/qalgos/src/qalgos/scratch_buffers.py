"""Named scratch tensors that a loop rewrites on every step instead of allocating fresh ones.

A tensor above glibc's mmap threshold (qlooper pins it at 128 KiB) is a fresh mapping, and each page of it is
faulted in and zeroed by the kernel on first touch: on the virtual machines this project measures on, that costs
about ten times the writing of it. A loop that makes the same temporaries every step (the AWQ scale search's
trial weights and loss products, 20 ratios a group) takes them from :class:`ScratchBuffers` instead: one flat
tensor per name, kept across steps and viewed at the shape each step asks for. Every value written into a view is
computed by the same operation as the fresh tensor it replaces (``out=`` variants and in-place methods), so the
results are the same bits; only where the memory comes from changes.
"""

from __future__ import annotations

import math

import torch


class ScratchBuffers:
    """Flat tensors by name: :meth:`take` returns a contiguous view ``shape`` of the name's tensor, allocating
    (after dropping the old one) only when the dtype or device differs or it is too small. A view stays valid until
    the next :meth:`take` or :meth:`release` of the same name; its contents are whatever the last step wrote.
    ``reuse=False`` allocates on every :meth:`take`: the fresh temporaries' pattern, as a baseline to measure
    against (``benchmarks/bench_qalgos_awq_scratch.py``)."""

    def __init__(self, reuse: bool = True) -> None:
        self.reuse = reuse
        self._flat: dict[str, torch.Tensor] = {}

    def take(
        self, name: str, shape: tuple[int, ...] | torch.Size, dtype: torch.dtype, device: torch.device | str = "cpu"
    ) -> torch.Tensor:
        numel = math.prod(shape)
        flat = self._flat.get(name)
        if (
            flat is None
            or not self.reuse
            or flat.dtype != dtype
            or flat.device != torch.device(device)
            or flat.numel() < numel
        ):
            self._flat.pop(name, None)  # freed before the larger one is allocated
            flat = torch.empty(numel, dtype=dtype, device=device)
            self._flat[name] = flat
        return flat[:numel].view(tuple(shape))

    def release(self, *names: str) -> None:
        """Drop the named tensors (every one when no name is given); views handed out keep theirs alive."""
        for name in names or tuple(self._flat):
            self._flat.pop(name, None)

    def nbytes(self) -> int:
        """Bytes held now (views handed out and since released not counted)."""
        return sum(t.numel() * t.element_size() for t in self._flat.values())
