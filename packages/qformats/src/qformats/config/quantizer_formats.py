"""What a lowbit quantization run writes, per method: the allowed formats and the default one.

One table for every package that quantizes (qhf's settings, qlooper's ``quantize_model``, the ``lowbit``
CLI). It is narrower than :data:`qformats.enums.METHOD_FORMATS`, which lists what a method may produce
*or load* (Marlin and BitBLAS included): these are the layouts lowbit's packers write. Method names are the
user's (``rtn`` is a solver, not a :class:`~qformats.enums.METHOD`: its checkpoint is GPTQ- or AWQ-family
by format); the weight-only methods list public subtypes (``float8_e4m3fn``, ``nf4``, ``q_k_m`` ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ..errors import ConfigError

#: method -> the formats a run writes (key order: the order listed to users).
QUANTIZER_FORMATS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "gptq": ("gptq", "gptq_v2", "gptq_p"),
        "awq": ("gemm", "gemv", "gemv_fast", "llm-awq"),
        "rtn": ("gptq", "gptq_v2", "gptq_p", "gemm", "gemv", "gemv_fast", "llm-awq"),
        "fp8": ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"),
        "bitsandbytes": ("fp4", "nf4", "int8"),
        "gguf": ("q_0", "q_k", "q_k_s", "q_k_m"),
        "qqq": ("qqq",),
        "paroquant": ("paroquant",),
    }
)
#: method -> the format written when none is given. GGUF has none here: its default follows ``bits``
#: (:func:`qformats.config.resolve.resolve`); bitsandbytes' is the 4-bit one (8-bit writes ``int8``).
DEFAULT_FORMATS: Mapping[str, str] = MappingProxyType(
    {
        "gptq": "gptq", "awq": "gemm", "rtn": "gptq", "qqq": "qqq", "fp8": "float8_e4m3fn", "bitsandbytes": "fp4",
        "paroquant": "paroquant",
    }
)  # fmt: skip
#: Solver variants that write their base method's formats (qlooper's processor names).
SOLVER_VARIANTS: Mapping[str, str] = MappingProxyType({"gptaq": "gptq", "foem": "gptq", "awq_gptq": "gptq"})
#: Weight-only methods: quantized from the weight alone (no calibration, no groups, no act-order).
WEIGHT_ONLY_METHODS: tuple[str, ...] = ("fp8", "bitsandbytes", "gguf")


def default_format(method: str) -> str:
    """The format a run of ``method`` (or a solver variant such as ``gptaq``) writes by default.

    Raises :class:`~qformats.errors.ConfigError` naming ``method`` when it has no fixed default (GGUF) or
    is not a quantizer lowbit runs.
    """
    base = SOLVER_VARIANTS.get(method, method)
    if base not in DEFAULT_FORMATS:
        known = ", ".join([*DEFAULT_FORMATS, *SOLVER_VARIANTS])
        raise ConfigError(f"method: no default format for {method!r} (methods with one: {known})")
    return DEFAULT_FORMATS[base]
