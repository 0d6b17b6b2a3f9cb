"""Named sets of quantization settings: ``reference`` (GPT-QModel 7.7.0's defaults) and ``best``.

A preset is a plain settings dict in the vocabulary of :func:`qhf.quant_config.read_quantize_config`; the user's
own keys override it (:func:`apply_preset`). ``best`` is the most accurate engine-loadable GPTQ recipe measured in
``benchmarks/bench_quality.py`` at 4, 3 and 2 bits (docs/algorithms.md quotes the table), and it depends on the
width (:func:`preset_settings`):

* at 3 and 4 bits (and any width without its own entry in :data:`BY_BITS`): a randomized Hadamard rotation folded
  into the weights (``rotation="hadamard"``: each part applied where its float64 check passes, left out with the
  reason otherwise, :mod:`qhf.rotation`), activation order (``desc_act``) and a per-group MSE range search
  (``mse=2.0``, the norm the reference's search uses); the damping stays the reference's 0.05 (a lighter one fits
  the calibration text better and generalizes worse);
* at 2 bits: the same with asymmetric zero points (``sym=False``; a symmetric 2-bit grid spends one of its four
  levels beyond the group's range) stored as ``gptq_v2`` (true zeros: the range search's groups take a zero of 0,
  which the ``gptq`` v1 layout cannot store; vLLM's ``gptq`` kernels and GPT-QModel's ``torch`` kernel read it).
  Measured on SmolLM2-135M and Gemma 3 270M it loses 0.08-0.12x of what the reference's best 2-bit GPTQ (asymmetric)
  loses on both texts (0.005-0.07x of its symmetric default's loss); the symmetric recipe lost 0.5-2.7x of the
  default's out of domain.

With a target engine (``lowbit quantize --target``) whose kernels all apply a LoRA adapter saved beside the
checkpoint (``qformats.engines.loads_lora_adapter``: vLLM and GPT-QModel; not llama.cpp), ``best`` adds EoRA
adapters of rank :data:`BEST_ADAPTER_RANK` (``adapter: {rank: 32}``, :func:`target_settings`): computed after each
module's solve against the rotated weights it is applied to, saved to ``eora/``. Without a target, or for one that
does not load LoRA, ``best`` writes no adapter (the same checkpoint as before, byte for byte).

The checkpoint stays a plain GPTQ model (rotated weights, norms at identity; a tied ``lm_head`` is written untied,
one more dense matrix on disk); its permuted ``g_idx`` is read by every GPTQ engine, and a few kernels reorder the
columns at load for it (``lowbit inspect`` says which). It costs about 2.1x the process CPU time of the default on
SmolLM2 at 4 bits and 2.2x at 2 bits (the range search and the rotated reads), so the default stays the reference's
recipe.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .quant_config import QuantConfigError

#: Each preset's settings at every width without an entry of its own in :data:`BY_BITS`.
PRESETS: dict[str, dict[str, Any]] = {
    "reference": {"method": "gptq"},
    "best": {"method": "gptq", "desc_act": True, "mse": 2.0, "rotation": "hadamard"},
}

#: preset -> {bits: its settings at that width}, replacing :data:`PRESETS`' entry there (measured per width).
BY_BITS: dict[str, dict[int, dict[str, Any]]] = {
    "best": {
        2: {**PRESETS["best"], "sym": False, "format": "gptq_v2"},  # the wider widths' recipe, asymmetric
    },
}

#: The EoRA rank ``best`` adds for a target that loads LoRA adapters: measured on SmolLM2 and Gemma 3 270M
#: (docs/algorithms.md, "EoRA inside best"); vLLM serves it with ``--max-lora-rank 32`` (its default cap is 16).
BEST_ADAPTER_RANK = 32

#: The width a config without ``bits`` quantizes to (qformats' ``QuantizeConfig`` family default).
DEFAULT_BITS = 4


def preset_settings(name: str, bits: Any = DEFAULT_BITS) -> dict[str, Any]:
    """The settings of preset ``name`` at ``bits`` (a copy; :data:`BY_BITS` where it has the width, else
    :data:`PRESETS`).

    Raises :class:`~qhf.quant_config.QuantConfigError` naming the known presets for an unknown ``name``.
    """
    if name not in PRESETS:
        raise QuantConfigError(f"preset: expected one of {', '.join(sorted(PRESETS))}, found {name!r}")
    by_bits = BY_BITS.get(name, {})
    width = bits if isinstance(bits, int) and not isinstance(bits, bool) else None
    return dict(by_bits[width] if width in by_bits else PRESETS[name])


def target_settings(name: str, target: str | None) -> dict[str, Any]:
    """What preset ``name`` adds for the target engine ``target`` (``ENGINE[:KERNEL]``; None: no target):
    ``best`` for a target whose kernels all apply a LoRA adapter beside the checkpoint gets an EoRA ``adapter`` of
    rank :data:`BEST_ADAPTER_RANK`; anything else nothing.

    Raises :class:`~qhf.quant_config.QuantConfigError` for an unknown ``name`` and
    ``qformats.engines.EngineTargetError`` for an unknown ``target``, each naming the known ones.
    """
    preset_settings(name)  # checks the name
    if name != "best" or target is None:
        return {}
    from qformats.engines import loads_lora_adapter

    return {"adapter": {"rank": BEST_ADAPTER_RANK}} if loads_lora_adapter(target) else {}


def apply_preset(name: str, config: Mapping[str, Any] | None = None, *, target: str | None = None) -> dict[str, Any]:
    """The settings dict of preset ``name`` at ``config``'s ``bits`` (default 4), with what it adds for ``target``
    (:func:`target_settings`) and ``config``'s keys on top (``config`` wins: ``adapter: None`` keeps the adapter
    out).

    Raises :class:`~qhf.quant_config.QuantConfigError` naming the known presets for an unknown ``name``.
    """
    given = dict(config or {})
    return {**preset_settings(name, given.get("bits", DEFAULT_BITS)), **target_settings(name, target), **given}
