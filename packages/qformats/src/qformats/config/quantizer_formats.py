"""What a lowbit quantization run writes, per method: one :class:`QuantizerFormats` record per method.

The one table of these facts for every package that quantizes (qhf's method registry reads its rows, qlooper's
``quantize_model``, the ``lowbit`` CLI, and qformats' own checkpoint code asks them: qformats sits below qhf and
cannot ask qhf's :class:`~qhf.methods.QuantMethod`). It is narrower than :data:`qformats.enums.METHOD_FORMATS`,
which lists what a method may produce *or load* (Marlin and BitBLAS included): these are the layouts lowbit's
packers write. Method names are the user's (``rtn`` is a solver, not a :class:`~qformats.enums.METHOD`: its
checkpoint is GPTQ- or AWQ-family by format); the weight-only methods list public subtypes (``float8_e4m3fn``,
``nf4``, ``q_k_m`` ...).

:data:`QUANTIZER_FORMATS`, :data:`DEFAULT_FORMATS`, :data:`SOLVER_VARIANTS` and :data:`WEIGHT_ONLY_METHODS` are
read-only views of the records, kept for their readers; a question about a method is an attribute of its record
(:func:`quantizer`), not a comparison with its name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ..errors import ConfigError


@dataclass(frozen=True)
class QuantizerFormats:
    """One quantization method's written formats and the checkpoint facts that follow from them.

    * ``method``: the user's method name (``gptq``, ``awq``, ``rtn``, ``fp8`` ...).
    * ``formats``: the formats a run writes (order: the order listed to users).
    * ``default_format``: the one written when none is given (``None``: it follows ``bits``, GGUF's
      :func:`qformats.config.resolve.resolve`; bitsandbytes' is the 4-bit one, 8-bit writes ``int8``).
    * ``weight_only``: quantized from the weight alone (no calibration, no groups, no act-order).
    * ``solver_variants``: qlooper processors that solve differently but write this method's formats
      (``gptaq``, ``foem``, ``awq_gptq`` for ``gptq``).
    * ``stores_g_idx``: its own formats can hold a ``g_idx`` (an act-order column permutation); AWQ's layouts
      cannot (a format listed by a method without it is refused ``desc_act``: :func:`formats_without_g_idx`).
    * ``marlin_layout``: the qformats layout a checkpoint stored under this method with ``format: marlin`` uses
      when its tensors are tiled (``marlin`` for GPTQ, ``awq_marlin`` for AWQ; ``None``: the GPTQ one).
    """

    method: str
    formats: tuple[str, ...]
    default_format: str | None
    weight_only: bool = False
    solver_variants: tuple[str, ...] = ()
    stores_g_idx: bool = True
    marlin_layout: str | None = None


_GPTQ_FORMATS = ("gptq", "gptq_v2", "gptq_p")
_AWQ_FORMATS = ("gemm", "gemv", "gemv_fast", "llm-awq")

#: Every quantizer's record, in the order listed to users.
RECORDS: tuple[QuantizerFormats, ...] = (
    QuantizerFormats("gptq", _GPTQ_FORMATS, "gptq", solver_variants=("gptaq", "foem", "awq_gptq"),
                     marlin_layout="marlin"),
    QuantizerFormats("awq", _AWQ_FORMATS, "gemm", stores_g_idx=False, marlin_layout="awq_marlin"),
    QuantizerFormats("rtn", (*_GPTQ_FORMATS, *_AWQ_FORMATS), "gptq"),
    QuantizerFormats("fp8", ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"),
                     "float8_e4m3fn", weight_only=True),
    QuantizerFormats("bitsandbytes", ("fp4", "nf4", "int8"), "fp4", weight_only=True),
    QuantizerFormats("gguf", ("q_0", "q_k", "q_k_s", "q_k_m"), None, weight_only=True),
    QuantizerFormats("qqq", ("qqq",), "qqq"),
    QuantizerFormats("paroquant", ("paroquant",), "paroquant"),
)  # fmt: skip

_BY_METHOD: Mapping[str, QuantizerFormats] = MappingProxyType({r.method: r for r in RECORDS})

#: method -> the formats a run writes (key order: the order listed to users).
QUANTIZER_FORMATS: Mapping[str, tuple[str, ...]] = MappingProxyType({r.method: r.formats for r in RECORDS})
#: method -> the format written when none is given (the methods with a fixed default).
DEFAULT_FORMATS: Mapping[str, str] = MappingProxyType(
    {r.method: r.default_format for r in RECORDS if r.default_format is not None}
)
#: Solver variants that write their base method's formats (qlooper's processor names).
SOLVER_VARIANTS: Mapping[str, str] = MappingProxyType({v: r.method for r in RECORDS for v in r.solver_variants})
#: Weight-only methods: quantized from the weight alone (no calibration, no groups, no act-order).
WEIGHT_ONLY_METHODS: tuple[str, ...] = tuple(r.method for r in RECORDS if r.weight_only)


def quantizer(method: str) -> QuantizerFormats | None:
    """The record of ``method`` (a solver variant gives its base method's), or ``None`` for a method lowbit does
    not quantize with (a stored-only method such as ``exl3``)."""
    return _BY_METHOD.get(SOLVER_VARIANTS.get(method, method))


def formats_without_g_idx() -> frozenset[str]:
    """The written formats that cannot hold a ``g_idx`` (act-order): those of the methods whose own layouts lack
    one (AWQ's ``gemm``, ``gemv``, ``gemv_fast``, ``llm-awq``)."""
    return frozenset(fmt for r in RECORDS if not r.stores_g_idx for fmt in r.formats)


def marlin_layout(method: str) -> str:
    """The tiled Marlin layout of a checkpoint stored under ``method`` with ``format: marlin`` (``awq``:
    ``awq_marlin``; GPTQ's ``marlin`` for every other method)."""
    found = quantizer(method)
    if found is not None and found.marlin_layout is not None:
        return found.marlin_layout
    return "marlin"


def default_format(method: str) -> str:
    """The format a run of ``method`` (or a solver variant such as ``gptaq``) writes by default.

    Raises :class:`~qformats.errors.ConfigError` naming ``method`` when it has no fixed default (GGUF) or
    is not a quantizer lowbit runs.
    """
    found = quantizer(method)
    if found is None or found.default_format is None:
        known = ", ".join([*DEFAULT_FORMATS, *SOLVER_VARIANTS])
        raise ConfigError(f"method: no default format for {method!r} (methods with one: {known})")
    return found.default_format
