"""When a module cannot be solved with its calibration data, quantize it with RTN and say why.

A module that saw too few tokens (a rarely routed expert) or whose Hessian is unusable is never
quantized silently some other way: the reason is logged and recorded in ``QuantResult.fallback``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from .errors import SpecError
from .result import QuantResult
from .rtn import quantize_rtn
from .spec import QuantSpec

logger = logging.getLogger(__name__)

STRATEGIES = ("rtn", "off")


@dataclass(frozen=True)
class FallbackPolicy:
    """``min_token_fraction``: a module seeing fewer than this fraction of the calibration tokens falls
    back (default 0.5%). ``strategy``: ``"rtn"`` (fall back to round-to-nearest) or ``"off"`` (never fall
    back for low coverage; a module with no token at all still falls back because nothing can be solved)."""

    min_token_fraction: float = 0.005
    strategy: str = "rtn"

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_token_fraction <= 1.0:
            raise SpecError(f"min_token_fraction: expected 0 <= value <= 1, found {self.min_token_fraction!r}")
        if self.strategy not in STRATEGIES:
            raise SpecError(f"strategy: expected one of {STRATEGIES}, found {self.strategy!r}")

    def reason(self, tokens_seen: int, total_tokens: int) -> str | None:
        """Why a module that saw ``tokens_seen`` of ``total_tokens`` calibration tokens must fall back, or None."""
        if tokens_seen < 0 or total_tokens < 0:
            raise SpecError(f"token counts: expected >= 0, found tokens_seen={tokens_seen}, total={total_tokens}")
        if tokens_seen == 0:
            return "no calibration token reached this module"
        if self.strategy == "off" or total_tokens == 0:
            return None
        if tokens_seen < self.min_token_fraction * total_tokens:
            share = 100.0 * tokens_seen / total_tokens
            return (
                f"saw {tokens_seen} of {total_tokens} calibration tokens ({share:.3f}%), "
                f"below the {100.0 * self.min_token_fraction:g}% threshold"
            )
        return None


def fall_back(weight: torch.Tensor, spec: QuantSpec, reason: str, nsamples: int = 0) -> QuantResult:
    """RTN for ``weight [out, in]`` with ``reason`` logged and recorded in the result."""
    logger.warning("falling back to RTN: %s", reason)
    result = quantize_rtn(weight, spec, fallback=reason)
    return QuantResult(result.weight, result.dequantized, result.loss, None, nsamples, reason)
