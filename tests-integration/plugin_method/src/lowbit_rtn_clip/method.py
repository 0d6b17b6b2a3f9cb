"""``rtn_clip`` as a lowbit method: its closed settings and its :class:`qhf.methods.QuantMethod`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from qhf.methods import QuantMethod, method_flag

from . import processor as _processor  # registers the qlooper processor "rtn_clip"
from .solve import ClipSpec

del _processor


@dataclass(frozen=True)
class RTNClipSettings:
    """``clip_grid``: shrink steps tried per group (>= 1); ``clip_min_ratio``: the smallest fraction of a group's
    range tried, in ``(0, 1]``."""

    clip_grid: int = 20
    clip_min_ratio: float = 0.5

    def __post_init__(self) -> None:
        if self.clip_grid < 1:
            raise ValueError(f"clip_grid: expected a positive integer, found {self.clip_grid}")
        if not 0.0 < self.clip_min_ratio <= 1.0:
            raise ValueError(f"clip_min_ratio: expected a number in (0, 1], found {self.clip_min_ratio}")


class RTNClipMethod(QuantMethod):
    """RTN with a per-group clipped range search, written in GPTQ's layouts (no calibration)."""

    name = "rtn_clip"
    summary = "RTN with a per-group clipped range search (a third-party method)"
    settings_type = RTNClipSettings
    processor_name = "rtn_clip"
    calibrated = False
    #: ``lowbit quantize --clip-grid N``: its setting ``clip_grid`` (a flag's name is its setting's)
    cli_flags = (
        *QuantMethod.cli_flags,
        method_flag(
            "--clip-grid",
            "rtn_clip: shrink steps tried per group (default 20)",
            about="an rtn_clip setting",
            type="positive_int",
            default=None,
            metavar="N",
        ),
    )

    def spec(self, cfg: Any) -> ClipSpec:
        own: RTNClipSettings = self.settings(cfg)
        return ClipSpec(super().spec(cfg), own.clip_grid, own.clip_min_ratio)
