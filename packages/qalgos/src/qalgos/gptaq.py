"""GPTAQ and FOEM: GPTQ that also corrects toward the unquantized model's inputs (and, FOEM, its weights).

GPTAQ (GPT-QModel's ``gptaq: {alpha}``) sees two activations per calibration token: ``x`` on the quantized
path (what GPTQ sees) and ``x_native``, the same module's input when every earlier module is unquantized.
Beside ``H = 2/N sum x xᵀ`` it accumulates ``dXXT = 2/N sum (x_native - x) xᵀ`` ``[in, in]`` and solves with
the extra term ``P = alpha * triu(dXXT Uᵀ, 1) U`` (``U``: the upper Cholesky factor of the damped inverse
Hessian). FOEM (``foem: {alpha, beta}``) adds the ``beta`` pull toward the original weights; with
``alpha = 0`` it needs no native input. Both are GPTQ's column solve, :func:`qalgos.gptq_solve.solve`,
given ``p`` and ``beta``. ``alpha = beta = 0`` is GPTQ exactly.

Differences from the reference, all documented in docs/algorithms.md: both sums are normalised by the
token count (the reference normalises by batch requests; ``P`` and the solve do not depend on that common
scale) and padding tokens are left out of both sums, as for GPTQ.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .column_order import ColumnPlan
from .errors import ShapeError, SpecError, StateError
from .gptq import GPTQ
from .gptq_solve import SolveOutput, solve
from .hessian import LowerGram
from .spec import QuantSpec


@dataclass(frozen=True)
class AsymmetricSpec:
    """The GPTAQ/FOEM terms. ``alpha``: weight of the native-input term (GPTAQ default 0.25, FOEM 0);
    ``beta``: FOEM's pull toward the original weights (GPTAQ 0, FOEM default 0.2). ``method`` names the
    config section it came from (``"gptaq"`` or ``"foem"``)."""

    method: str
    alpha: float
    beta: float = 0.0

    def __post_init__(self) -> None:
        if self.method not in ("gptaq", "foem"):
            raise SpecError(f"method: expected 'gptaq' or 'foem', found {self.method!r}")
        if not 0.0 <= float(self.alpha) <= 1.0:
            raise SpecError(f"{self.method}.alpha: expected 0 <= alpha <= 1, found {self.alpha!r}")
        if not 0.0 <= float(self.beta) <= 1.0:
            raise SpecError(f"{self.method}.beta: expected 0 <= beta <= 1, found {self.beta!r}")
        if self.method == "gptaq" and self.beta != 0.0:
            raise SpecError(f"gptaq.beta: GPTAQ has no beta term (use foem), found {self.beta!r}")

    @property
    def needs_native(self) -> bool:
        """Whether the native (unquantized-model) inputs are needed: ``alpha > 0``."""
        return self.alpha > 0.0


def gptaq_defaults() -> AsymmetricSpec:
    """GPT-QModel 7.7.0's ``GPTAQConfig()``: alpha 0.25."""
    return AsymmetricSpec("gptaq", 0.25)


def foem_defaults() -> AsymmetricSpec:
    """GPT-QModel 7.7.0's ``FOEMConfig()``: alpha 0, beta 0.2."""
    return AsymmetricSpec("foem", 0.0, 0.2)


class GPTAQ(GPTQ):
    """GPTQ accumulator plus ``dXXT`` (see the module docstring).

    ``add_pair(x [..., in], x_native [..., in], mask [...] | None)`` adds one batch of both activations
    (token for token); ``add_batch`` (quantized path only) is allowed only when ``alpha == 0``.
    ``quantize`` is :meth:`qalgos.gptq.GPTQ.quantize`.
    """

    algorithm = "gptaq"

    def __init__(self, in_features: int, spec: QuantSpec, terms: AsymmetricSpec) -> None:
        super().__init__(in_features, spec)
        self.terms = terms
        self.algorithm = terms.method
        self._dxxt = torch.zeros(in_features, in_features, dtype=torch.float64) if terms.needs_native else None

    def add_batch(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> int:
        if self.terms.needs_native:
            raise StateError(f"{self.terms.method}: alpha > 0 needs the native inputs; call add_pair")
        return super().add_batch(x, mask)

    def add_segment(self, total: LowerGram, tokens: int) -> None:
        if self.terms.needs_native:
            raise StateError(f"{self.terms.method}: alpha > 0 needs the native inputs; call add_pair")
        super().add_segment(total, tokens)

    def add_pair(self, x: torch.Tensor, x_native: torch.Tensor, mask: torch.Tensor | None = None) -> int:
        """Add quantized-path ``x`` and native ``x_native`` (same shape ``[..., in]``); returns tokens added."""
        if not isinstance(x_native, torch.Tensor) or tuple(x_native.shape) != tuple(x.shape):
            found = tuple(x_native.shape) if isinstance(x_native, torch.Tensor) else type(x_native).__name__
            raise ShapeError(f"x_native: expected the shape of x {tuple(x.shape)}, found {found}")
        added = GPTQ.add_batch(self, x, mask)
        if self._dxxt is not None and added:
            flat = x.detach().reshape(-1, self.in_features).to(torch.float32)
            native = x_native.detach().reshape(-1, self.in_features).to(device=flat.device, dtype=torch.float32)
            if mask is not None:
                keep = mask.reshape(-1).to(device=flat.device, dtype=torch.bool)
                flat, native = flat[keep], native[keep]
            self._dxxt += ((native - flat).T @ flat).to(device=self._dxxt.device, dtype=torch.float64)
        return added

    def dxxt(self) -> torch.Tensor:
        """``2/N sum (x_native - x) xᵀ`` as float32 ``[in, in]`` (zeros when alpha is 0 or no token)."""
        if self._dxxt is None or self.nsamples == 0:
            return torch.zeros(self.in_features, self.in_features, dtype=torch.float32)
        return (self._dxxt * (2.0 / self.nsamples)).to(torch.float32)

    def _column_solve(
        self,
        wt: torch.Tensor,
        upper: torch.Tensor,
        plan: ColumnPlan,
        dead: torch.Tensor,
        scales: torch.Tensor,
        zeros: torch.Tensor,
    ) -> SolveOutput:
        p = None
        if self._dxxt is not None:
            dxxt = self.dxxt()
            if bool(dead.any()):
                dxxt[:, dead] = 0.0
            if not plan.is_identity():
                dxxt = dxxt[plan.perm][:, plan.perm]
            p = asymmetric_term(dxxt, upper, self.terms.alpha)
        return solve(wt, upper, plan, self.spec, scales, zeros, p=p, beta=float(self.terms.beta))


def asymmetric_term(dxxt: torch.Tensor, upper: torch.Tensor, alpha: float) -> torch.Tensor:
    """``P = alpha * triu(dXXT Uᵀ, 1) U``, float32 ``[in, in]`` (``dxxt``, ``upper`` in visiting order)."""
    return (alpha * torch.triu(dxxt @ upper.T, diagonal=1)) @ upper
