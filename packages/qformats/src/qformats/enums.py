"""FORMAT and METHOD: the serialized names of checkpoint layouts and quantization algorithms.

The string values are exactly those written in ``quantize_config.json`` by the reference
implementation, so a value read from a file round-trips unchanged. For the weight-only families
FP8, BitsAndBytes and GGUF the config's public ``format`` field holds a *subtype*
(``float8_e4m3fn``, ``nf4``, ``q_k_m`` ...); :func:`resolve_format_family` maps it to the family
FORMAT used for layout and backend selection (``FORMAT("nf4")`` is deliberately not valid).
"""

from __future__ import annotations

import re
from enum import Enum

from .errors import ConfigError


class FORMAT(str, Enum):
    """Checkpoint layout families (the ``format`` / ``checkpoint_format`` config field)."""

    GPTQ = "gptq"
    GPTQ_V2 = "gptq_v2"
    GPTQ_P = "gptq_p"
    GGUF = "gguf"
    FP8 = "fp8"
    BITSANDBYTES = "bitsandbytes"
    MARLIN = "marlin"
    BITBLAS = "bitblas"
    QQQ = "qqq"
    EXL3 = "exl3"
    VPTQ = "vptq"
    GEMM = "gemm"
    GEMV = "gemv"
    GEMV_FAST = "gemv_fast"
    LLM_AWQ = "llm-awq"
    PAROQUANT = "paroquant"

    def __str__(self) -> str:
        return self.value


class METHOD(str, Enum):
    """Quantization algorithms / export families (the ``method`` / ``quant_method`` config field)."""

    GPTQ = "gptq"
    AWQ = "awq"
    QQQ = "qqq"
    GGUF = "gguf"
    FP8 = "fp8"
    BITSANDBYTES = "bitsandbytes"
    EXL3 = "exl3"
    PARO = "paroquant"
    VPTQ = "vptq"

    def __str__(self) -> str:
        return self.value


# Which layouts each method may produce or load (reference: the method -> formats table).
METHOD_FORMATS: dict[METHOD, frozenset[FORMAT]] = {
    METHOD.GPTQ: frozenset({FORMAT.GPTQ, FORMAT.GPTQ_V2, FORMAT.GPTQ_P, FORMAT.MARLIN, FORMAT.BITBLAS}),
    METHOD.AWQ: frozenset({FORMAT.GEMM, FORMAT.GEMV, FORMAT.GEMV_FAST, FORMAT.MARLIN, FORMAT.BITBLAS, FORMAT.LLM_AWQ}),
    METHOD.QQQ: frozenset({FORMAT.QQQ}),
    METHOD.GGUF: frozenset({FORMAT.GGUF}),
    METHOD.FP8: frozenset({FORMAT.FP8}),
    METHOD.BITSANDBYTES: frozenset({FORMAT.BITSANDBYTES}),
    METHOD.EXL3: frozenset({FORMAT.EXL3}),
    METHOD.PARO: frozenset({FORMAT.PAROQUANT}),
    METHOD.VPTQ: frozenset({FORMAT.VPTQ}),
}

# Formats that only one method can produce: reading such a format fixes the method.
AWQ_ONLY_FORMATS: frozenset[FORMAT] = frozenset({FORMAT.GEMM, FORMAT.GEMV, FORMAT.GEMV_FAST, FORMAT.LLM_AWQ})
GPTQ_ONLY_FORMATS: frozenset[FORMAT] = frozenset({FORMAT.GPTQ, FORMAT.GPTQ_V2, FORMAT.GPTQ_P})

FP8_SUBTYPES: frozenset[str] = frozenset(
    {"float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"}
)
BNB_SUBTYPES: frozenset[str] = frozenset({"fp4", "nf4", "int8"})
# GGUF bit aliases (``bits`` may hold one of these) and the public subtype grammar of ``format``.
GGUF_BIT_ALIASES: frozenset[str] = frozenset(
    {
        "q1_0",
        "q1_0_g128",
        "q2_0",
        "q4_0",
        "q8_0",
        "q4_k",
        "q4_k_s",
        "q4_k_m",
        "q5_k",
        "q5_k_s",
        "q5_k_m",
        "q6_k",
    }
)
_GGUF_PUBLIC_FORMAT = re.compile(r"(q|iq)_(0|k)(_(xs|s|m|l))?|q_0_g128")


def _norm(value: object) -> str:
    if isinstance(value, Enum):
        value = value.value
    return str(value).strip().lower()


def parse_method(value: object) -> METHOD:
    """``METHOD`` for a serialized value (case-insensitive); :class:`ConfigError` names the field."""
    text = _norm(value)
    try:
        return METHOD(text)
    except ValueError:
        known = ", ".join(m.value for m in METHOD)
        raise ConfigError(f"method: expected one of {known}, found {value!r}") from None


def parse_format(value: object) -> FORMAT:
    """``FORMAT`` for a family value (case-insensitive). Subtypes are refused: use the resolver."""
    text = _norm(value)
    try:
        return FORMAT(text)
    except ValueError:
        hint = ""
        if format_subtype_family(text) is not None:
            hint = f" ({text!r} is a subtype; resolve it with resolve_format_family)"
        known = ", ".join(f.value for f in FORMAT)
        raise ConfigError(f"format: expected one of {known}, found {value!r}{hint}") from None


def format_subtype_family(value: object) -> FORMAT | None:
    """The family of a weight-only subtype string (``nf4`` -> BITSANDBYTES), or ``None``."""
    text = _norm(value).replace("-", "_")
    if text in FP8_SUBTYPES:
        return FORMAT.FP8
    if text in BNB_SUBTYPES:
        return FORMAT.BITSANDBYTES
    if text in GGUF_BIT_ALIASES or _GGUF_PUBLIC_FORMAT.fullmatch(text):
        return FORMAT.GGUF
    return None


def resolve_format_family(fmt: object | None, method: object | None = None) -> FORMAT:
    """The family FORMAT for a config's ``format`` (family value or subtype) and ``method``.

    Rules (reference ``resolve_quant_format``): method gguf/fp8/bitsandbytes fixes the family; a
    FORMAT value is returned as is; a known subtype maps to its family; no format means GPTQ.
    """
    meth = parse_method(method) if method is not None else None
    if meth in (METHOD.GGUF, METHOD.FP8, METHOD.BITSANDBYTES):
        return FORMAT(meth.value)
    if fmt is None:
        return FORMAT.GPTQ
    text = _norm(fmt)
    if text in FORMAT._value2member_map_:
        return FORMAT(text)
    family = format_subtype_family(text)
    if family is None:
        known = ", ".join(f.value for f in FORMAT)
        raise ConfigError(f"format: expected a FORMAT value ({known}) or a known subtype, found {fmt!r}")
    return family
