"""The reference's GGUF quantization aliases -> the ggml tensor type a checkpoint stores.

A GGUF config names its subtype either as a bits alias (``"q4_k_m"``) or as ``bits`` plus a public
format (``4`` + ``"q_k_m"``). The ``_s``/``_m`` mixes pick per-tensor types in llama.cpp; the
reference packs every linear with the base K type, so ``q4_k_s`` and ``q4_k_m`` both store Q4_K.
Width defaults (``bits`` alone): 1 -> q1_0, 2 -> q2_0, 4 -> q4_0, 5 -> q5_k_m, 6 -> q6_k, 8 -> q8_0;
3-bit has no default.
"""

from __future__ import annotations

from ...enums import FORMAT
from ...errors import ConfigError
from .types import GGMLType, ggml_type

ALIAS_TO_TYPE: dict[str, str] = {
    "q1_0": "Q1_0",
    "q1_0_g128": "Q1_0",
    "q2_0": "Q2_0",
    "q4_0": "Q4_0",
    "q8_0": "Q8_0",
    "q4_k": "Q4_K",
    "q4_k_s": "Q4_K",
    "q4_k_m": "Q4_K",
    "q5_k": "Q5_K",
    "q5_k_s": "Q5_K",
    "q5_k_m": "Q5_K",
    "q6_k": "Q6_K",
}
DEFAULT_ALIAS: dict[int, str] = {1: "q1_0", 2: "q2_0", 4: "q4_0", 5: "q5_k_m", 6: "q6_k", 8: "q8_0"}


def alias_for(bits: int | str, public_format: str | None = None) -> str:
    """The bits alias for ``bits`` (an int or already an alias) and an optional public format."""
    if isinstance(bits, str):
        alias = bits.strip().lower()
        if alias not in ALIAS_TO_TYPE:
            raise ConfigError(f"bits: {bits!r} is not a GGUF alias; known: {', '.join(ALIAS_TO_TYPE)}")
        return alias
    if public_format is None or public_format.strip().lower() == FORMAT.GGUF.value:
        default = DEFAULT_ALIAS.get(int(bits))
        if default is None:
            raise ConfigError(f"bits: GGUF has no default subtype for {bits}-bit; name one (e.g. format 'q_k')")
        return default
    fmt = public_format.strip().lower()
    if not fmt.startswith("q_"):
        raise ConfigError(f"format: expected a GGUF public format such as 'q_0' or 'q_k_m', found {public_format!r}")
    alias = f"q{int(bits)}{fmt[1:]}"
    if alias not in ALIAS_TO_TYPE:
        raise ConfigError(
            f"bits/format: {bits}-bit {public_format!r} gives {alias!r}, which the reference does not write"
        )
    return alias


def tensor_type(bits: int | str, public_format: str | None = None) -> GGMLType:
    """The ggml type stored for a config's ``bits`` (+ public ``format``): ``(4, "q_k_m")`` -> Q4_K."""
    return ggml_type(ALIAS_TO_TYPE[alias_for(bits, public_format)])
