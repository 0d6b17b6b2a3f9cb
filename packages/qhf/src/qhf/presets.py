"""Named sets of quantization settings: ``reference`` (GPT-QModel 7.7.0's defaults) and ``best``.

A preset is a plain settings dict in the vocabulary of :func:`qhf.quant_config.read_quantize_config`; the user's
own keys override it (:func:`apply_preset`). ``best`` is the most accurate 4-bit GPTQ recipe measured in
``benchmarks/bench_quality.py`` (docs/algorithms.md quotes the table): activation order
(``desc_act``) and a per-group MSE range search (``mse=2.0``, the norm the reference's search uses); the
damping stays the reference's 0.05 (a lighter one fits the calibration text better and generalizes
worse). It costs about 2x the solve time of the
default (the range search), and its checkpoint carries a permuted ``g_idx``, which every GPTQ engine
reads; a few engine kernels reorder the columns at load for it (``lowbit inspect`` says which).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .quant_config import QuantConfigError

PRESETS: dict[str, dict[str, Any]] = {
    "reference": {"method": "gptq"},
    "best": {"method": "gptq", "desc_act": True, "mse": 2.0},
}


def apply_preset(name: str, config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The settings dict of preset ``name`` with ``config``'s keys on top (``config`` wins).

    Raises :class:`~qhf.quant_config.QuantConfigError` naming the known presets for an unknown ``name``.
    """
    if name not in PRESETS:
        raise QuantConfigError(f"preset: expected one of {', '.join(sorted(PRESETS))}, found {name!r}")
    return {**PRESETS[name], **dict(config or {})}
