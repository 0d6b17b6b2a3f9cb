"""EXL3 quantization of one linear weight on the CPU: sign flips and 128-block Hadamards on both sides, a
per-tensor scale, and LDLQ error feedback over 16-row blocks with a Viterbi trellis search per 16x16 tile.

The result is a ``qformats.layouts.exl3.EXL3Weight`` whose reader computes (``K = in``, ``N = out``)::

    W^T = diag(suh) · H_K · inner · H_N · diag(svh)          (H: block-diagonal 128x128 Hadamard / sqrt(128))

so with random signs ``su [K]``, ``sv [N]`` and a scale ``g`` this quantizer writes ``suh = su`` and
``svh = g · sv`` (float16, as exllamav3 stores them) and codes ``inner ≈ H_K · diag(su) · W^T · diag(sv) · H_N / g``
(``H`` is its own inverse). The weighted error ``tr(dW · H · dW^T)`` is then ``g² · tr(Eᵀ · Hr · E)`` with
``E`` the error of ``inner`` and ``Hr = H_K · diag(su) · H · diag(su) · H_K`` the rotated Hessian, exactly
(one scale for the whole tensor keeps the output side an isometry, so LDLQ's per-column objective is the
true one). ``g`` makes the rotated weight's RMS :data:`SCALE_FRACTION` of the codebook's value RMS.

LDLQ (as GPTQ, with 16-row blocks instead of columns): ``R`` = the upper Cholesky factor of ``(Hr + λI)⁻¹``;
for each block ``b`` of 16 rows of ``inner`` (one tile row), the tiles of the current targets are searched
(:func:`qalgos.exl3_trellis_search.search_tiles`), and the error ``E_b`` moves the later rows:
``inner[rest] -= R[b, rest]ᵀ · R[b, b]⁻ᵀ · E_b``. Inside a tile the search minimises the plain squared error
(the 16x16 diagonal block of the LDL factor is not used as a metric, as in QTIP).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from qformats.layouts.exl3 import EXL3Weight
from qformats.layouts.exl3.trellis import CODEBOOKS, codebook_values, tile_perm

from .errors import NumericalError, ShapeError, SpecError
from .exl3_trellis_search import search_tiles
from .finite_check import all_finite
from .result import check_weight

#: Block size of the EXL3 Hadamard rotations (both sides).
HADAMARD = 128
#: Tile side (tiles are 16x16, coded as 256 trellis positions).
TILE = 16
#: The rotated weight's RMS as a fraction of the codebook's value RMS. Measured on Gaussian tiles with
#: ``3inst`` (relative MSE at 0.7 / 0.8 / 0.9 / 1.0 / 1.1): 2 bits 0.0828 / 0.0744 / 0.0701 / 0.0702 /
#: 0.0737, 4 bits 0.0053 / 0.0048 / 0.0049 / -: 0.9 is within 2% of the best at both.
SCALE_FRACTION = 0.9


@dataclass(frozen=True, eq=False)
class EXL3Result:
    """One quantized weight.

    * ``weight``: the :class:`EXL3Weight` (symbols, bits, codebook, float16 ``suh [in]`` / ``svh [out]``).
    * ``dequantized``: float32 ``[out, in]``, bit for bit ``weight.dequantize()``.
    * ``loss``: ``tr(dW · H · dW^T)`` with the undamped Hessian given (float64; ``sum(dW²)`` without one).
    * ``scale``: the per-tensor scale ``g`` as stored (``|svh|``).
    * ``search_gap``: the summed ``cost - bound`` of the tail-biting searches (0: every tile provably optimal
      for its targets).
    """

    weight: EXL3Weight
    dequantized: torch.Tensor
    loss: float
    scale: float
    search_gap: float


def block_hadamard(size: int) -> torch.Tensor:
    """float64 ``[128, 128]`` Sylvester Hadamard / sqrt(128) (symmetric, orthonormal); ``size`` is checked only."""
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < HADAMARD:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    if size % HADAMARD:
        raise ShapeError(f"hadamard: size {size} is not a multiple of {HADAMARD}")
    scaled: torch.Tensor = h / HADAMARD**0.5
    return scaled


def rotate_rows(x: torch.Tensor) -> torch.Tensor:
    """``H_K · x`` for ``x [K, M]`` (block-diagonal 128x128 Hadamard on the rows)."""
    k = x.shape[0]
    return (block_hadamard(k) @ x.reshape(k // HADAMARD, HADAMARD, -1)).reshape(x.shape)


def rotate_cols(x: torch.Tensor) -> torch.Tensor:
    """``x · H_N`` for ``x [M, N]``."""
    n = x.shape[1]
    return (x.reshape(x.shape[0], n // HADAMARD, HADAMARD) @ block_hadamard(n)).reshape(x.shape)


def check_exl3_input(weight: torch.Tensor, hessian: torch.Tensor | None, bits: int, codebook: str) -> None:
    """Raise :class:`ShapeError` / :class:`SpecError` naming the field unless the inputs can be quantized."""
    check_weight(weight)
    if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= 8:
        raise SpecError(f"bits: expected an integer in 1..8 trellis bits per weight, found {bits!r}")
    if codebook not in CODEBOOKS:
        raise SpecError(f"codebook: expected one of {CODEBOOKS}, found {codebook!r}")
    out_f, in_f = weight.shape
    if in_f % HADAMARD or out_f % HADAMARD:
        raise ShapeError(f"weight: EXL3 needs in and out multiples of {HADAMARD}, found [out={out_f}, in={in_f}]")
    if hessian is not None:
        if tuple(hessian.shape) != (in_f, in_f):
            raise ShapeError(f"hessian: expected [{in_f}, {in_f}], found {tuple(hessian.shape)}")
        if not hessian.dtype.is_floating_point or not all_finite(hessian):
            raise ShapeError(f"hessian: expected finite floating values, found {hessian.dtype} with NaN/inf")


def random_signs(size: int, gen: torch.Generator) -> torch.Tensor:
    """float64 ``[size]`` of ±1 drawn from ``gen``."""
    return torch.randint(0, 2, (size,), generator=gen).to(torch.float64).mul_(2).sub_(1)


def feedback_factor(hr: torch.Tensor, damp: float) -> torch.Tensor:
    """float64 upper Cholesky factor ``R`` of ``(hr + damp · mean(diag(hr)) · I)⁻¹`` (GPTQ's ``Hinv``)."""
    k = hr.shape[0]
    mean_diag = float(hr.diagonal().mean())
    lam = damp * (mean_diag if mean_diag > 0 else 1.0)
    damped = hr + lam * torch.eye(k, dtype=torch.float64)
    lower, info = torch.linalg.cholesky_ex(damped)
    if int(info):
        raise NumericalError(f"hessian: the rotated Hessian with damp {damp} is not positive definite")
    inverse = torch.cholesky_inverse(lower)
    factored = torch.linalg.cholesky_ex(inverse, upper=True)
    if int(factored.info):
        raise NumericalError(f"hessian: the inverse of the rotated Hessian with damp {damp} is not positive definite")
    upper: torch.Tensor = factored.L
    return upper


def quantize_tile_row(
    block: torch.Tensor, values: torch.Tensor, bits: int, window: int | None = None
) -> tuple[np.ndarray, torch.Tensor, float]:
    """Code one tile row ``block`` float64 ``[16, N]``: (uint8 symbols ``[N/16, 256]``, the decoded float64
    ``[16, N]``, the summed search gap)."""
    n = block.shape[1]
    perm = torch.from_numpy(tile_perm())
    tiles = block.reshape(TILE, n // TILE, TILE).permute(1, 0, 2).reshape(n // TILE, TILE * TILE)
    found = search_tiles(tiles[:, perm].to(torch.float32), values, bits, window=window)
    decoded = torch.empty(n // TILE, TILE * TILE, dtype=torch.float64)
    decoded[:, perm] = values.to(torch.float64)[found.states]
    back = decoded.reshape(n // TILE, TILE, TILE).permute(1, 0, 2).reshape(TILE, n)
    symbols = found.symbols.to(torch.uint8).numpy()
    return symbols, back, float((found.cost - found.bound).sum())


def quantize_exl3(
    weight: torch.Tensor,
    hessian: torch.Tensor | None,
    bits: int,
    *,
    codebook: str = "3inst",
    seed: int = 0,
    damp: float = 0.01,
    feedback: bool = True,
    window: int | None = None,
) -> EXL3Result:
    """Quantize ``weight [out, in]`` (in and out multiples of 128) to EXL3 at ``bits`` (1..8) per weight.

    ``hessian [in, in]`` (``2/N · Σ x xᵀ``, any float dtype; None: identity, plain trellis coding) weights the
    error; ``feedback`` False codes every tile row from the rotated weight alone (no LDLQ). ``seed`` draws the
    sign flips: the same inputs and seed give the same symbols and bytes. ``window``: the reduced tail-biting
    search (:func:`qalgos.exl3_trellis_search.search_tiles`), None for the full two passes.
    """
    check_exl3_input(weight, hessian, bits, codebook)
    if not damp >= 0:
        raise SpecError(f"damp: expected a non-negative fraction, found {damp!r}")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise SpecError(f"window: expected None or a positive number of positions, found {window!r}")
    out_f, in_f = weight.shape
    wt = weight.detach().to(torch.float64).T  # [K, N]
    gen = torch.Generator().manual_seed(seed)
    su, sv = random_signs(in_f, gen), random_signs(out_f, gen)
    rotated = rotate_cols(rotate_rows(su[:, None] * wt) * sv[None, :])
    values = torch.from_numpy(codebook_values(codebook))
    codebook_rms = float(values.to(torch.float64).square().mean().sqrt())
    weight_rms = float(rotated.square().mean().sqrt())
    wanted = weight_rms / (SCALE_FRACTION * codebook_rms) if weight_rms > 0 else 1.0
    if not wanted <= float(np.finfo(np.float16).max):
        raise NumericalError(f"weight: its scale {wanted:.3g} overflows the float16 svh")
    scale16 = np.float16(wanted)
    scale = float(scale16) if float(scale16) > 0 else float(np.finfo(np.float16).tiny)
    target = rotated / scale
    factor = None
    if hessian is not None and feedback:
        h = hessian.detach().to(torch.float64)
        hr = rotate_rows(rotate_cols(su[:, None] * h * su[None, :]))
        factor = feedback_factor(hr, damp)
    symbols = np.empty((in_f // TILE, out_f // TILE, TILE * TILE), np.uint8)
    gap = 0.0
    for b in range(in_f // TILE):
        rows = slice(b * TILE, (b + 1) * TILE)
        symbols[b], coded, row_gap = quantize_tile_row(target[rows], values, bits, window)
        gap += row_gap
        if factor is not None and (b + 1) * TILE < in_f:
            err = torch.linalg.solve_triangular(factor[rows, rows].T, target[rows] - coded, upper=False)
            target[(b + 1) * TILE :] -= factor[rows, (b + 1) * TILE :].T @ err
    result = EXL3Weight(
        symbols,
        bits,
        codebook,
        su.to(torch.float16).numpy(),
        (sv * scale).to(torch.float16).numpy(),
    )
    dequantized = torch.from_numpy(result.dequantize())
    diff = dequantized.to(torch.float64) - weight.detach().to(torch.float64)
    if hessian is None:
        loss = float(diff.square().sum())
    else:
        loss = float(torch.einsum("oi,ij,oj->", diff, hessian.detach().to(torch.float64), diff))
    return EXL3Result(result, dequantized, loss, scale, gap)
