"""The mixed-precision settings of a config, checked and resolved by :func:`qhf.quant_config.read_quantize_config`.

* ``bits_budget``: the average stored bits per weight the quantized decoder-layer modules may take (codes plus
  scales, zeros and ``g_idx`` as the config's layout stores them; lm_head is not quantized and not counted).
  Absent: every module at ``bits`` (the default; nothing below changes a run).
* ``bits_candidates``: the widths a module may get (default :func:`default_candidates`: ``bits`` and the wider
  of 3, 4 and 8). Format ``gptq`` / ``gptq_v2`` stores 2, 3, 4 and 8 bits (what GPT-QModel and vLLM's GPTQ
  kernels read); lowbit's planar ``gptq_p`` also 5, 6 and 7.

Only the integer GPTQ-format methods take a budget: ``gptq`` (with its ``gptaq`` / ``foem`` variants and an EoRA
``adapter``) and ``rtn`` writing a GPTQ format. AWQ is refused: the AWQ layouts engines read hold 4-bit codes
only, and its scale search shares one width per scaled group. QQQ is 4-bit by design; ParoQuant and the
weight-only methods have their own per-module types.
"""

from __future__ import annotations

import math
from typing import Any

from qformats.config import QuantizeConfig

from ..methods.registry import get_method, method_names
from ..quant_config import QuantConfigError

BUDGET_KEY = "bits_budget"
CANDIDATES_KEY = "bits_candidates"
#: The widths a default candidate set draws from: what an engine reads from format ``gptq`` (GPT-QModel, vLLM
#: ``gptq``) but 2 bits, whose damage the sensitivity estimate underrates (docs/algorithms.md).
DEFAULT_WIDTHS: tuple[int, ...] = (3, 4, 8)


def default_candidates(base: int) -> list[int]:
    """The default ``bits_candidates`` of a run at ``base`` bits: the base and the wider :data:`DEFAULT_WIDTHS`
    (4 -> [4, 8], 3 -> [3, 4, 8]). A budget then buys wider modules and never narrows one below ``bits``: on
    SmolLM2, narrowing ``down_proj`` modules to pay for wider ones doubled the out-of-domain perplexity
    (docs/algorithms.md); ``bits_candidates`` may list narrower widths."""
    return sorted({base, *(b for b in DEFAULT_WIDTHS if b > base)})


#: The widths each GPTQ-family format stores.
FORMAT_BITS: dict[str, tuple[int, ...]] = {
    "gptq": (2, 3, 4, 8),
    "gptq_v2": (2, 3, 4, 8),
    "gptq_p": (2, 3, 4, 5, 6, 7, 8),
}


def budget_settings(method: str, cfg: QuantizeConfig) -> dict[str, Any]:
    """``{"bits_budget": B, "bits_candidates": [...]}`` (candidates sorted, the default filled in) for a config
    with a budget, ``{}`` without one; raises :class:`~qhf.quant_config.QuantConfigError` naming the field."""
    budget = cfg.settings.get(BUDGET_KEY)
    candidates = cfg.settings.get(CANDIDATES_KEY)
    if budget is None:
        if candidates is not None:
            raise QuantConfigError(f"{CANDIDATES_KEY}: only used with {BUDGET_KEY}, which is not set")
        return {}
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not math.isfinite(budget) or budget <= 0:
        raise QuantConfigError(f"{BUDGET_KEY}: expected a positive number of stored bits per weight, found {budget!r}")
    quant_method = get_method(method)
    if not quant_method.takes_budget:
        takers = [name for name in method_names() if get_method(name).takes_budget]
        raise QuantConfigError(
            f"{BUDGET_KEY}: mixed precision runs with method {' or '.join(takers)} (and GPTQ's gptaq/foem variants); "
            f"method {method!r} cannot take a budget ({quant_method.budget_refusal})"
        )
    fmt = str(cfg.format)
    if fmt not in FORMAT_BITS:
        raise QuantConfigError(
            f"{BUDGET_KEY}: mixed precision writes a GPTQ format ({', '.join(FORMAT_BITS)}); format {fmt!r} cannot "
            "take per-module widths an engine reads"
        )
    allowed = FORMAT_BITS[fmt]
    chosen = default_candidates(int(cfg.width)) if candidates is None else candidates
    if (
        not isinstance(chosen, (list, tuple))
        or not chosen
        or any(isinstance(b, bool) or not isinstance(b, int) for b in chosen)
        or len(set(chosen)) != len(chosen)
    ):
        raise QuantConfigError(f"{CANDIDATES_KEY}: expected a list of distinct integer widths, found {candidates!r}")
    outside = sorted(b for b in chosen if b not in allowed)
    if outside:
        hint = "; 5-7 bits need format gptq_p (lowbit's planar layout, no engine reads it)" if fmt != "gptq_p" else ""
        raise QuantConfigError(
            f"{CANDIDATES_KEY}: format {fmt!r} stores {list(allowed)}-bit codes, found {outside}{hint}"
        )
    return {BUDGET_KEY: budget, CANDIDATES_KEY: sorted(chosen)}
