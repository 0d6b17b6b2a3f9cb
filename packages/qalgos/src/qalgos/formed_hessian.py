"""A GPTQ Hessian formed elsewhere: the float32 ``2/N * sum x xᵀ`` an accumulator produced, and its ``N``.

A solve reads its Hessian only as the float32 matrix :meth:`qalgos.hessian.HessianAccumulator.hessian`
returns (a pure function of the float64 sum and the token count), so a solver given that matrix and the
count solves exactly as one holding the accumulator: the same bits. qlooper's sharded executor forms it once
on the driver and sends it, rather than the float64 sum and the unflushed rows, to a worker per module
(:meth:`qalgos.gptq.GPTQ.from_hessian`).
"""

from __future__ import annotations

import torch

from .errors import ShapeError, StateError


class FormedHessian:
    """Stands in for a :class:`~qalgos.hessian.HessianAccumulator` whose Hessian was formed already.

    ``hessian``: float32 ``[in, in]`` (``2/N * sum x xᵀ``, as the accumulator gave it; zeros when ``N`` is 0);
    ``nsamples``: ``N``, the tokens it was formed from. It takes no batches and has no state dict.
    """

    def __init__(self, hessian: torch.Tensor, nsamples: int) -> None:
        if not isinstance(hessian, torch.Tensor) or hessian.ndim != 2 or hessian.shape[0] != hessian.shape[1]:
            found = tuple(hessian.shape) if isinstance(hessian, torch.Tensor) else type(hessian).__name__
            raise ShapeError(f"hessian: expected a square [in, in] tensor, found {found}")
        if hessian.dtype != torch.float32:
            raise ShapeError(f"hessian: expected float32 (the accumulator's Hessian), found {hessian.dtype}")
        if int(nsamples) < 0:
            raise StateError(f"nsamples: expected >= 0, found {nsamples}")
        self.in_features = int(hessian.shape[0])
        self.nsamples = int(nsamples)
        self._hessian: torch.Tensor | None = hessian

    def _held(self) -> torch.Tensor:
        if self._hessian is None:
            raise StateError("the Hessian statistics were released after the solve; start a new accumulator")
        return self._hessian

    def add_batch(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> int:
        """Refused: the Hessian is final."""
        raise StateError("a formed Hessian takes no more batches (it was formed from all of them)")

    def rows_to_boundary(self) -> int:
        """Refused, as :meth:`add_batch`."""
        raise StateError("a formed Hessian takes no more rows (it was formed from all of them)")

    def add_segment(self, total: object, tokens: int) -> None:
        """Refused, as :meth:`add_batch`."""
        raise StateError("a formed Hessian takes no more segments (it was formed from all of them)")

    def chain_start(self) -> None:
        """Refused, as :meth:`add_batch`."""
        raise StateError("a formed Hessian takes no more segments (it was formed from all of them)")

    def add_chained(self, total: object, segments: int) -> None:
        """Refused, as :meth:`add_batch`."""
        raise StateError("a formed Hessian takes no more segments (it was formed from all of them)")

    def hessian(self, *, release: bool = False) -> torch.Tensor:
        """A CPU copy of the float32 Hessian (the caller may change it; the given tensor never changes).
        ``release``: drop this object's reference as well."""
        out = self._held().to("cpu", copy=True)
        if release:
            self.release()
        return out

    def release(self) -> None:
        """Drop the Hessian (after the last solve that needs it); later calls raise StateError."""
        self._hessian = None

    def state_dict(self) -> dict[str, torch.Tensor | int]:
        """Refused: there is no float64 sum to save."""
        raise StateError("a formed Hessian has no resumable state (no float64 sum); save the accumulator's")

    def load_state_dict(self, state: dict[str, torch.Tensor | int | float]) -> None:
        """Refused, as :meth:`state_dict`."""
        raise StateError("a formed Hessian cannot load an accumulator state; use GPTQ(in_features, spec)")
