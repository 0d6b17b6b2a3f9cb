"""Named sets of quantization settings: ``reference`` (GPT-QModel 7.7.0's defaults) and ``best``.

A preset is a plain settings dict in the vocabulary of :func:`qhf.quant_config.read_quantize_config`; the user's
own keys override it (:func:`apply_preset`). ``best`` is the most accurate engine-loadable GPTQ recipe measured in
``benchmarks/bench_quality.py`` at 4, 3 and 2 bits (docs/algorithms.md quotes the table): a randomized Hadamard
rotation folded into the weights (``rotation="hadamard"``: each part applied where its float64 check passes,
left out with the reason otherwise, :mod:`qhf.rotation`), activation order (``desc_act``) and a per-group MSE
range search (``mse=2.0``, the norm the reference's search uses); the damping stays the reference's 0.05 (a
lighter one fits the calibration text better and generalizes worse). The checkpoint stays a plain GPTQ model
(rotated weights, norms at identity; a tied ``lm_head`` is written untied, one more dense matrix on disk); its
permuted ``g_idx`` is read by every GPTQ engine, and a few kernels reorder the columns at load for it
(``lowbit inspect`` says which). It costs about 2.1x the process CPU time of the default on SmolLM2 (the range
search and the rotated reads), so the default stays the reference's recipe.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .quant_config import QuantConfigError

PRESETS: dict[str, dict[str, Any]] = {
    "reference": {"method": "gptq"},
    "best": {"method": "gptq", "desc_act": True, "mse": 2.0, "rotation": "hadamard"},
}


def apply_preset(name: str, config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The settings dict of preset ``name`` with ``config``'s keys on top (``config`` wins).

    Raises :class:`~qhf.quant_config.QuantConfigError` naming the known presets for an unknown ``name``.
    """
    if name not in PRESETS:
        raise QuantConfigError(f"preset: expected one of {', '.join(sorted(PRESETS))}, found {name!r}")
    return {**PRESETS[name], **dict(config or {})}
