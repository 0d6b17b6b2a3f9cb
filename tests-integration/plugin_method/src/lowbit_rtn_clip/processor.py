"""The qlooper processor of ``rtn_clip``, registered in ``qlooper.processors.registry`` when this module is
imported (qhf's registry imports it through the method's entry point)."""

from __future__ import annotations

from typing import Any

from qlooper.processors.registry import register_processor
from qlooper.processors.weight_only import WeightOnlyProcessor

from .solve import ClipSpec, quantize_clipped


class ClippedRTNProcessor(WeightOnlyProcessor):
    """Quantizes every module from its weight alone with :func:`quantize_clipped` (no calibration forwards);
    ``module_specs``: modules' own :class:`ClipSpec`."""

    def __init__(self, spec: ClipSpec, module_specs: dict[str, Any] | None = None) -> None:
        # WeightOnlyProcessor runs any spec its ``quantize`` takes; its annotation names the built-in specs only
        super().__init__(spec, quantize=quantize_clipped, method="rtn_clip", module_specs=module_specs)  # type: ignore[arg-type]


register_processor("rtn_clip", ClipSpec, ClippedRTNProcessor, per_module=True)
