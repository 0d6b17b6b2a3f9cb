"""``rtn_clip``: a third-party lowbit method (RTN with a per-group clipped range search). See README.md."""

from __future__ import annotations

from .method import RTNClipMethod, RTNClipSettings
from .processor import ClippedRTNProcessor
from .solve import ClipSpec, quantize_clipped

__all__ = ["ClipSpec", "ClippedRTNProcessor", "RTNClipMethod", "RTNClipSettings", "quantize_clipped"]
