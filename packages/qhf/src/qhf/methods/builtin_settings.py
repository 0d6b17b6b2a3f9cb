"""The typed settings of lowbit's built-in methods (frozen dataclasses; their defaults are the reference's).

A resolved config's ``settings`` hold these fields (:mod:`qhf.calibrated_settings`, :mod:`qhf.weight_only_settings`
resolve them; their defaults tables are built from these classes) beside the reference's pass-through fields
(``pack_impl``, ``offload_to_disk`` ...), which a built-in config keeps verbatim so a GPT-QModel config reads back
unchanged. :meth:`qhf.methods.QuantMethod.settings` gives the typed view.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CalibratedSettings:
    """GPTQ family, AWQ, RTN, QQQ, ParoQuant. ``act_group_aware`` None: resolved by the reader (on for GPTQ with
    groups and without ``desc_act``); ``gptaq`` / ``foem`` / ``adapter`` / ``rotation``: their sections or None."""

    damp_percent: float = 0.05
    damp_auto_increment: float = 0.01
    static_groups: bool = False
    act_group_aware: bool | None = None
    mse: float = 0.0
    true_sequential: bool = True
    gptaq: dict[str, float] | None = None
    foem: dict[str, float] | None = None
    adapter: dict[str, Any] | None = None
    rotation: dict[str, Any] | None = None
    awq_scales: bool = False


@dataclass(frozen=True)
class WeightOnlySettings:
    """FP8 (``weight_scale_method``: row, tensor or block; ``weight_block_size`` ``(rows, cols)`` with block) and
    bitsandbytes (``block_size``, ``compress_statistics``); GGUF has none of its own."""

    weight_scale_method: str = "row"
    weight_block_size: tuple[int, int] | None = None
    block_size: int = 64
    compress_statistics: bool = True
