"""The quantization spec shared by every integer quantizer (RTN, GPTQ, AWQ)."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import SpecError

SCALE_DTYPES = ("float32", "float16")


@dataclass(frozen=True)
class QuantSpec:
    """How to quantize one linear weight ``[out, in]`` to integer codes.

    * ``bits``: code width, 2..8.
    * ``group_size``: input columns per group, or ``-1`` for one group per output channel (per-channel).
    * ``sym``: symmetric (zero point fixed at ``2**(bits-1)``) or asymmetric (zero point searched).
    * ``desc_act``: GPTQ processes columns by descending Hessian diagonal; groups follow that order.
    * ``static_groups``: GPTQ computes every group's scale/zero on the original weight before solving.
    * ``act_group_aware``: GPTQ processes groups by importance (and columns by importance inside a
      group) while keeping the natural ``g_idx``; requires ``desc_act=False``.
    * ``damp_percent``: fraction of the mean Hessian diagonal added to the diagonal (0 <= x < 1).
    * ``damp_auto_increment``: step by which the damping grows while Cholesky fails.
    * ``mse``: when > 0, the norm exponent of a shrink-grid search for each group's range (0 = off).
    * ``block_size``: GPTQ lazy-update block width in columns.
    * ``scale_dtype``: the dtype the scales are stored in, ``"float32"`` (default) or ``"float16"``. Codes
      are always chosen under the float32 scales (as the reference does); float16 scales are clamped to
      the float16 range while solving and rounded only when the logical weight is built, and the result's
      ``dequantized`` is computed from the stored scales, so a checkpoint dequantizes exactly as reported.
    """

    bits: int
    group_size: int = 128
    sym: bool = True
    desc_act: bool = False
    static_groups: bool = False
    act_group_aware: bool = False
    damp_percent: float = 0.05
    damp_auto_increment: float = 0.01
    mse: float = 0.0
    block_size: int = 128
    scale_dtype: str = "float32"

    def __post_init__(self) -> None:
        if isinstance(self.bits, bool) or not isinstance(self.bits, int) or not 2 <= self.bits <= 8:
            raise SpecError(f"bits: expected an integer in 2..8, found {self.bits!r}")
        if not isinstance(self.group_size, int) or (self.group_size != -1 and self.group_size <= 0):
            raise SpecError(f"group_size: expected -1 or a positive integer, found {self.group_size!r}")
        if not 0.0 <= self.damp_percent < 1.0:
            raise SpecError(f"damp_percent: expected 0 <= value < 1, found {self.damp_percent!r}")
        if not 0.0 <= self.damp_auto_increment < 1.0:
            raise SpecError(f"damp_auto_increment: expected 0 <= value < 1, found {self.damp_auto_increment!r}")
        if self.mse < 0.0:
            raise SpecError(f"mse: expected >= 0 (0 disables the search), found {self.mse!r}")
        if not isinstance(self.block_size, int) or self.block_size <= 0:
            raise SpecError(f"block_size: expected a positive integer, found {self.block_size!r}")
        if self.scale_dtype not in SCALE_DTYPES:
            raise SpecError(f"scale_dtype: expected one of {SCALE_DTYPES}, found {self.scale_dtype!r}")
        if self.desc_act and self.act_group_aware:
            raise SpecError("act_group_aware: requires desc_act=False (the two orderings are alternatives)")

    @property
    def maxq(self) -> int:
        """Largest code, ``2**bits - 1``."""
        return (1 << self.bits) - 1

    def groups(self, in_features: int) -> int:
        """Number of groups ``G`` along an input axis of ``in_features`` columns."""
        if self.group_size == -1:
            return 1
        return -(-in_features // self.group_size)

    def group_width(self, in_features: int) -> int:
        """Columns per group (``in_features`` for per-channel)."""
        return in_features if self.group_size == -1 else self.group_size
