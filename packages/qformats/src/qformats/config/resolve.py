"""Resolution of ``method`` and ``format`` by the reference's rules, and per-family defaults.

* No format: ``gptq`` (noted). No method: the method implied by the format family.
* ``backend: "llm-awq"`` forces method ``awq``, format ``llm-awq`` and pack_dtype ``int16``.
* method ``awq`` with a format AWQ cannot produce is fixed to ``gemm``; any other method that cannot
  produce the format is replaced by the format's method (both noted, never silent).
* GPTQ ``gptq``/``gptq_v2`` with 5/6/7 bits -- in the base bits or any positive dynamic rule -- is routed
  to planar ``gptq_p`` (the only layout that stores those widths).
* FP8 forces bits 8, group_size -1, sym, no desc_act (default subtype ``float8_e4m3fn``); BitsAndBytes
  takes bits 4 (default subtype ``fp4``) or 8 (``int8``) and never desc_act; GGUF bits may be an alias
  such as ``q4_k_m`` (public format ``q_k_m``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..enums import (
    AWQ_ONLY_FORMATS,
    FORMAT,
    GGUF_BIT_ALIASES,
    GPTQ_ONLY_FORMATS,
    METHOD,
    METHOD_FORMATS,
    format_subtype_family,
    parse_method,
    resolve_format_family,
)
from ..errors import ConfigError

_FAMILY_METHOD: dict[FORMAT, METHOD] = {
    FORMAT.GGUF: METHOD.GGUF,
    FORMAT.FP8: METHOD.FP8,
    FORMAT.BITSANDBYTES: METHOD.BITSANDBYTES,
    FORMAT.QQQ: METHOD.QQQ,
    FORMAT.EXL3: METHOD.EXL3,
    FORMAT.VPTQ: METHOD.VPTQ,
    FORMAT.PAROQUANT: METHOD.PARO,
}
# ``q4_k_m`` -> (q, 4, k, m); ``q1_0_g128`` (Prism Q1_0 with 128-wide blocks) -> (q, 1, 0, g128).
_GGUF_ALIAS = re.compile(r"(q|iq)(\d)_(0|k)(?:_(xs|s|m|l|g128))?")
PLANAR_ONLY_BITS = (5, 6, 7)


@dataclass(frozen=True)
class Resolved:
    """The resolved method, public format string (family value or subtype) and bits."""

    method: METHOD
    format: str
    bits: int | float
    family: FORMAT


def gguf_bits(value: object) -> tuple[int, str] | None:
    """``(width, public_format)`` for a GGUF bits alias (``"q4_k_m"`` -> ``(4, "q_k_m")``), else None."""
    if not isinstance(value, str):
        return None
    text = value.strip().lower().replace("-", "_")
    match = _GGUF_ALIAS.fullmatch(text)
    if text not in GGUF_BIT_ALIASES or match is None:
        return None
    version, width, variant, quality = match.groups()
    public = f"{version}_{variant}" + (f"_{quality}" if quality else "")
    return int(width), public


def gguf_bits_alias(bits: int, public_format: str) -> str:
    """The serialized GGUF bits alias for ``bits`` and a public format (``4, "q_k_m"`` -> ``"q4_k_m"``)."""
    head, _, rest = public_format.partition("_")
    return f"{head}{bits}_{rest}"


def _names_exl3(method: object | None, fmt: object | None) -> bool:
    """True when the method or the format names EXL3 (the one family whose ``bits`` may be a float)."""
    names = {str(getattr(v, "value", v)).strip().lower() for v in (method, fmt) if v is not None}
    return METHOD.EXL3.value in names or FORMAT.EXL3.value in names


def _bits(value: object, *, exl3: bool = False) -> int | float:
    """The config's ``bits``: an integer; for EXL3 also a float bits-per-weight (``3.0``, ``2.5``)."""
    if exl3 and isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"bits: expected a finite EXL3 bits-per-weight, found {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and value.strip().isdigit():
            return int(value.strip())
        raise ConfigError(f"bits: expected an integer, found {value!r}")
    return value


def resolve(
    method: object | None,
    fmt: object | None,
    bits: object,
    *,
    dynamic_bits: tuple[int, ...] = (),
    backend: object | None = None,
    notes: list[str] | None = None,
) -> Resolved:
    """Apply the reference's method/format rules; every automatic fix is appended to ``notes``."""
    notes = notes if notes is not None else []
    alias = gguf_bits(bits)
    if alias is not None:
        gguf_width, public = alias
        if fmt is not None and format_subtype_family(fmt) is not FORMAT.GGUF and str(fmt).lower() != FORMAT.GGUF.value:
            raise ConfigError(f"bits: GGUF bits alias {bits!r} requires format gguf, found format {fmt!r}")
        if fmt is not None and str(fmt).lower() not in (FORMAT.GGUF.value, public) and gguf_bits(fmt) != alias:
            raise ConfigError(f"format: {fmt!r} disagrees with GGUF bits alias {bits!r}")
        return Resolved(METHOD.GGUF, public, gguf_width, FORMAT.GGUF)
    width = _bits(bits, exl3=_names_exl3(method, fmt)) if bits is not None else 4
    if isinstance(backend, str) and backend.strip().lower() == "llm-awq":
        notes.append("backend 'llm-awq': method awq, format llm-awq, pack_dtype int16")
        return Resolved(METHOD.AWQ, FORMAT.LLM_AWQ.value, width, FORMAT.LLM_AWQ)
    meth = parse_method(method) if method is not None else None
    if fmt is None:
        if meth is None or meth is METHOD.GPTQ:
            notes.append("format missing: inferred 'gptq'")
            fmt = FORMAT.GPTQ.value
        elif meth is METHOD.AWQ:
            notes.append("format missing for method awq: inferred 'gemm'")
            fmt = FORMAT.GEMM.value
        else:
            fmt = meth.value
    family = resolve_format_family(fmt, meth)
    if bits is None and family is FORMAT.FP8:
        width = 8
    public = str(fmt).strip().lower() if family.value != str(fmt).strip().lower() else family.value
    if family in (FORMAT.GGUF, FORMAT.FP8, FORMAT.BITSANDBYTES):
        public = _subtype(family, public, int(width))
    if meth is METHOD.AWQ and family not in METHOD_FORMATS[METHOD.AWQ]:
        notes.append(f"method awq cannot produce format {fmt!r}: format fixed to 'gemm'")
        family, public = FORMAT.GEMM, FORMAT.GEMM.value
    target = _method_for(family, meth)
    if meth is not None and meth is not target:
        notes.append(f"method {meth.value!r} does not produce format {public!r}: method fixed to {target.value!r}")
    if target is METHOD.GPTQ and family in (FORMAT.GPTQ, FORMAT.GPTQ_V2):
        wide = [b for b in (width, *dynamic_bits) if b in PLANAR_ONLY_BITS]
        if wide:
            notes.append(f"{wide[0]}-bit GPTQ is stored planar only: format {public!r} routed to 'gptq_p'")
            family, public = FORMAT.GPTQ_P, FORMAT.GPTQ_P.value
    return Resolved(target, public, width, family)


def _method_for(family: FORMAT, meth: METHOD | None) -> METHOD:
    if family in AWQ_ONLY_FORMATS:
        return METHOD.AWQ
    if family in GPTQ_ONLY_FORMATS:
        return METHOD.GPTQ
    if family in _FAMILY_METHOD:
        return _FAMILY_METHOD[family]
    # marlin / bitblas: both GPTQ and AWQ produce them; keep the given method, default gptq.
    return meth if meth in (METHOD.GPTQ, METHOD.AWQ) else METHOD.GPTQ


def _subtype(family: FORMAT, public: str, bits: int) -> str:
    """The public subtype of a weight-only family (default when only the family was given)."""
    if public == family.value:
        return _default_subtype(family, bits)
    public = public.replace("-", "_")
    alias = gguf_bits(public) if family is FORMAT.GGUF else None
    if alias is not None:
        if alias[0] != bits:
            raise ConfigError(f"format: GGUF subtype {public!r} is {alias[0]}-bit, bits is {bits}")
        return alias[1]
    if format_subtype_family(public) is not family:
        raise ConfigError(f"format: {public!r} is not a {family.value} subtype")
    if family is FORMAT.GGUF and public.endswith("_g128") and gguf_bits_alias(bits, public) not in GGUF_BIT_ALIASES:
        raise ConfigError(f"format: GGUF {public!r} exists only as 1-bit 'q1_0_g128', bits is {bits}")
    return public


def _default_subtype(family: FORMAT, bits: int) -> str:
    if family is FORMAT.FP8:
        return "float8_e4m3fn"
    if family is FORMAT.BITSANDBYTES:
        return "int8" if bits == 8 else "fp4"
    defaults = {1: "q_0", 2: "q_0", 4: "q_0", 5: "q_k_m", 6: "q_k", 8: "q_0"}
    if bits not in defaults:
        raise ConfigError(f"bits: no default GGUF format exists for {bits}-bit")
    return defaults[bits]


def check_bits(resolved: Resolved) -> None:
    """Bits allowed per family (GPTQ-style 2..8, planar 2..8, GGUF 1..8, FP8 8, BitsAndBytes 4/8, EXL3 any
    bits-per-weight in 1..8, a float allowed)."""
    bits, family = resolved.bits, resolved.family
    if family is FORMAT.EXL3:
        if not 1 <= bits <= 8:
            raise ConfigError(f"bits: format 'exl3' allows bits per weight in 1..8, found {bits}")
        return
    allowed: tuple[int, ...]
    if family is FORMAT.FP8:
        allowed = (8,)
    elif family is FORMAT.BITSANDBYTES:
        allowed = (4, 8)
    elif family is FORMAT.GGUF:
        allowed = tuple(range(1, 9))
    elif family in (FORMAT.GPTQ, FORMAT.GPTQ_V2):
        allowed = (2, 3, 4, 8)
    else:
        allowed = tuple(range(2, 9))
    if bits not in allowed:
        raise ConfigError(f"bits: format {resolved.format!r} allows {list(allowed)}, found {bits}")
    if family is FORMAT.BITSANDBYTES:
        expect = ("int8",) if bits == 8 else ("fp4", "nf4")
        if resolved.format not in expect:
            raise ConfigError(f"format: {bits}-bit bitsandbytes expects {list(expect)}, found {resolved.format!r}")
