"""Learning the residual rotation of a folded rotation from calibration statistics (SpinQuant's optimized ``Q``).

The model's residual stream is rotated by an orthogonal ``Q`` (``qhf.rotation``): a *reader* of the stream
(q/k/v, gate/up; norm scale already folded in) stores ``W Q``, a *writer* (o_proj, down_proj) stores ``Qᵀ W``.
:func:`learn_rotation` starts from ``Q0`` (the randomized Hadamard matrix) and minimizes a prediction of the
quantized model's error, the sum over the quantized linears ``m`` of their round-to-nearest output
noise-to-signal ratio:

    L(Q) = sum_m  N_m(Q) / S_m,     N_m = ||E' C_m||² + f_m ||E||²,     S_m = ||W_m C_m||² + f_m ||W_m||²

with ``Y = W_m Q`` (reader) or ``Qᵀ W_m`` (writer), ``E = Y - RTN(Y)`` (the spec's width, group size and
symmetry, GPTQ's scale/zero formulas without the MSE search), ``E' = E Qᵀ`` for a reader (its error in the
unrotated input's basis) and ``E`` for a writer (its input is not on the residual stream). ``C_m`` ``[in, k]``
and ``f_m`` approximate the module's input Gram ``G = E[x xᵀ]`` as ``C Cᵀ + f I`` (:func:`gram_factor`: its
top-``k`` eigenpairs and the mean of the other eigenvalues), so ``N_m`` is ``E ||(W' - RTN(W')) x||²`` up to
that approximation and the cost of a step stays one product ``[rows, in] x [in, in]`` per module. ``S_m`` does
not depend on ``Q``. The ratio is scale-free, so every layer's modules count alike
(:mod:`qalgos.sensitivity`).

Optimization: ``Q = Q0 · cayley(A - Aᵀ)`` (``cayley(K) = (I - K/2)⁻¹ (I + K/2)``, orthogonal for any skew
``K``; ``A = 0`` is the start), Adam on ``A`` with a learning rate falling linearly to 0, the rounding's gradient
passed straight through (the error's gradient then flows through the groups' scales: the step shrinks each
group's range). Each step reads a seeded random :data:`ROW_FRACTION` of every module's rows. Arithmetic is
float32 on the CPU (one ``torch`` thread count gives the same bytes); the returned matrix is formed in float64 from
the final ``A`` and is orthogonal to float64 rounding. The reported losses use every row.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from .errors import ShapeError
from .spec import QuantSpec

#: Eigenpairs of an input Gram kept exactly (the rest enter as their mean, an isotropic floor).
GRAM_RANK = 32
#: Fraction of each module's rows a step reads (at least one row).
ROW_FRACTION = 0.125
READER = "read"
WRITER = "write"


@dataclass(frozen=True)
class RotationTerm:
    """One quantized linear in :math:`L(Q)`: ``name``, ``side`` (:data:`READER` or :data:`WRITER`), ``weight``
    ``[out, in]`` float32 (folded but not residual-rotated), ``factor`` ``[in, k]`` float32 and ``floor`` (its
    input Gram ``≈ factor factorᵀ + floor I``, :func:`gram_factor`)."""

    name: str
    side: str
    weight: torch.Tensor
    factor: torch.Tensor
    floor: float

    def signal(self) -> float:
        """``S_m`` (module docstring), float64 sum."""
        w = self.weight.to(torch.float64)
        return float((w @ self.factor.to(torch.float64)).square().sum() + self.floor * w.square().sum())


@dataclass(frozen=True)
class LearnedRotation:
    """``matrix`` ``[n, n]`` float64 orthogonal; ``loss_start`` / ``loss_end``: :math:`L` at ``Q0`` and at
    ``matrix`` (every row); ``steps`` taken; ``seconds`` / ``cpu_seconds`` of the optimization."""

    matrix: torch.Tensor
    loss_start: float
    loss_end: float
    steps: int
    seconds: float
    cpu_seconds: float


def gram_factor(gram: torch.Tensor, rank: int = GRAM_RANK) -> tuple[torch.Tensor, float]:
    """``(C [n, k] float32, f)`` with ``gram ≈ C Cᵀ + f I``: ``C = U_k diag(sqrt(λ_k))`` over the ``k = min(rank,
    n)`` largest eigenvalues of the symmetric ``gram`` ``[n, n]`` and ``f`` the mean of the others (0 when none);
    negative rounding eigenvalues count as 0."""
    if gram.dim() != 2 or gram.shape[0] != gram.shape[1]:
        raise ShapeError(f"gram_factor: expected a square Gram [n, n], found {tuple(gram.shape)}")
    g = gram.detach().to(device="cpu", dtype=torch.float64)
    values, vectors = torch.linalg.eigh((g + g.T) / 2)
    values = values.clamp_min(0.0)
    n = int(g.shape[0])
    k = min(rank, n)
    top = values[n - k :]
    factor = vectors[:, n - k :] * top.sqrt()
    floor = float(values[: n - k].mean()) if n > k else 0.0
    return factor.to(torch.float32), floor


def _round_ste(x: torch.Tensor) -> torch.Tensor:
    return x + (torch.round(x) - x).detach()


def _fake_quant_groups(y: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    """RTN of ``y`` ``[rows, g, width]`` per last-axis group, GPTQ formulas, straight-through rounding."""
    zero_t = torch.zeros((), dtype=y.dtype)
    xmin = torch.minimum(y.amin(dim=-1), zero_t)
    xmax = torch.maximum(y.amax(dim=-1), zero_t)
    if spec.sym:
        xmax = torch.maximum(xmin.abs(), xmax)
        xmin = torch.where(xmin < 0, -xmax, xmin)
    both_zero = (xmin == 0) & (xmax == 0)
    xmin = torch.where(both_zero, torch.full_like(xmin, -1.0), xmin)
    xmax = torch.where(both_zero, torch.full_like(xmax, 1.0), xmax)
    scale = (xmax - xmin) / spec.maxq
    if spec.sym:
        zero = torch.full_like(scale, float((spec.maxq + 1) // 2))
    else:
        zero = torch.clamp(torch.round(-xmin / scale), 0, spec.maxq).detach()
    scale, zero = scale[..., None], zero[..., None]
    codes = torch.clamp(_round_ste(y / scale) + zero, 0, spec.maxq)
    return scale * (codes - zero)


def fake_quant(y: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    """The RTN dequantized ``y`` ``[rows, in]`` (natural groups along ``in``, the last one possibly partial) with
    straight-through rounding: forward equal to :func:`qalgos.rtn.quantize_groups` under GPTQ parameters and
    ``mse = 0`` (up to float32 rounding of the division), gradient through the scales."""
    rows, width_in = y.shape
    width = spec.group_width(width_in)
    full = (width_in // width) * width
    parts = []
    if full:
        parts.append(_fake_quant_groups(y[:, :full].reshape(rows, -1, width), spec).reshape(rows, full))
    if full < width_in:
        parts.append(_fake_quant_groups(y[:, full:].reshape(rows, 1, -1), spec).reshape(rows, -1))
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)


def cayley(skew: torch.Tensor) -> torch.Tensor:
    """``(I - K/2)⁻¹ (I + K/2)`` of a skew-symmetric ``K`` ``[n, n]``: orthogonal, identity at ``K = 0``."""
    eye = torch.eye(skew.shape[0], dtype=skew.dtype)
    solved: torch.Tensor = torch.linalg.solve(eye - skew / 2, eye + skew / 2)
    return solved


def term_noise(term: RotationTerm, q: torch.Tensor, spec: QuantSpec, rows: torch.Tensor | None = None) -> torch.Tensor:
    """``N_m`` (module docstring) of ``term`` under the float32 rotation ``q`` ``[n, n]``; ``rows``: only those
    output rows of the rotated weight (None: all)."""
    if term.side == READER:
        w = term.weight if rows is None else term.weight[rows]
        y = w @ q
        back = q.T @ term.factor  # E Qᵀ C = E (Qᵀ C)
    else:
        y = q.T @ term.weight if rows is None else q[:, rows].T @ term.weight
        back = term.factor
    error = y - fake_quant(y, spec)
    return (error @ back).square().sum() + term.floor * error.square().sum()


def rotation_loss(terms: list[RotationTerm], q: torch.Tensor, spec: QuantSpec, signals: list[float]) -> float:
    """:math:`L(Q)` over every row, float64 sum of the float32 terms."""
    q32 = q.to(torch.float32)
    with torch.no_grad():
        return sum(float(term_noise(t, q32, spec)) / s for t, s in zip(terms, signals, strict=True) if s > 0)


def _check(terms: list[RotationTerm], n: int) -> None:
    for t in terms:
        width = t.weight.shape[1] if t.side == READER else t.weight.shape[0]
        if t.side not in (READER, WRITER) or width != n or t.factor.shape[0] != t.weight.shape[1]:
            raise ShapeError(
                f"learn_rotation: term {t.name}: expected a {READER!r}/{WRITER!r} weight with the residual width "
                f"{n} on its {'input' if t.side == READER else 'output'} side and a factor [in, k], found side "
                f"{t.side!r}, weight {tuple(t.weight.shape)}, factor {tuple(t.factor.shape)}"
            )


def learn_rotation(
    terms: list[RotationTerm],
    start: torch.Tensor,
    spec: QuantSpec,
    *,
    steps: int,
    lr: float,
    seed: int,
    row_fraction: float = ROW_FRACTION,
) -> LearnedRotation:
    """Minimize :math:`L(Q)` from ``start`` ``[n, n]`` (float64, orthogonal) for ``steps`` Adam steps of
    learning rate ``lr`` (module docstring); ``seed`` draws the row subsets. ``steps = 0`` returns ``start``."""
    if start.dim() != 2 or start.shape[0] != start.shape[1]:
        raise ShapeError(f"learn_rotation: expected a square start rotation, found {tuple(start.shape)}")
    n = int(start.shape[0])
    _check(terms, n)
    clock, cpu = time.perf_counter(), time.process_time()
    q0 = start.detach().to(device="cpu", dtype=torch.float64)
    signals = [t.signal() for t in terms]
    loss_start = rotation_loss(terms, q0, spec, signals)
    param = torch.zeros(n, n, dtype=torch.float32, requires_grad=True)
    optimizer = torch.optim.Adam([param], lr=lr)
    generator = torch.Generator().manual_seed(seed)
    q0_32 = q0.to(torch.float32)
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = lr * (1.0 - step / steps)
        q = q0_32 @ cayley(param - param.T)
        loss = torch.zeros((), dtype=torch.float32)
        for term, signal in zip(terms, signals, strict=True):
            if signal <= 0:
                continue
            out = int(term.weight.shape[0]) if term.side == READER else n
            count = max(1, math.ceil(row_fraction * out))
            rows = torch.randperm(out, generator=generator)[:count] if count < out else None
            loss = loss + term_noise(term, q, spec, rows) * (out / (count * signal))
        optimizer.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
    a = param.detach().to(torch.float64)
    matrix = q0 @ cayley(a - a.T)
    loss_end = rotation_loss(terms, matrix, spec, signals) if steps else loss_start
    return LearnedRotation(
        matrix if steps else q0,
        loss_start,
        loss_end,
        steps,
        round(time.perf_counter() - clock, 3),
        round(time.process_time() - cpu, 3),
    )
