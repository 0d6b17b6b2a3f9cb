"""EXL3 module tensors (FORMAT ``exl3``): ``trellis``, ``suh``, ``svh`` (plus a ``mcg`` / ``mul1`` marker).

Tensors (``K = in``, ``N = out``, multiples of 128; ``b`` bits per weight):

* ``trellis`` int16 ``[K/16, N/16, 16*b]``: the packed symbols of every 16x16 tile (:mod:`.trellis`).
* ``suh`` ``[K]`` and ``svh`` ``[N]``: float16 / bfloat16 / float32 scales on the two Hadamard sides.
* ``mcg`` or ``mul1``: a marker tensor naming the codebook (absent: ``3inst``); its content is not read.

Rules (ids ``EXL3-*``): presence, dtypes and shapes; ``b`` in 1..8 (``trellis`` last dim a multiple of
16); both markers at once is ambiguous; ``su`` / ``sv`` (the scale names that exllamav3 kernels use
without the Hadamard folding) are not read by the reference's torch path and are refused here.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ...errors import LayoutError
from ...layout_checks import check_tensors, raise_on_violations, require_dims
from ...violations import Violation
from .logical import EXL3Weight
from .trellis import pack_symbols, unpack_symbols

RULE = "EXL3"
TITLE = "EXL3"
SCALE_DTYPES = ("float16", "float32", "bfloat16")


def codebook_of(tensors: Mapping[str, np.ndarray]) -> str:
    """``mcg`` or ``mul1`` when that marker tensor is present, else ``3inst`` (the reference's rule)."""
    return "mcg" if "mcg" in tensors else ("mul1" if "mul1" in tensors else "3inst")


def bits_of(tensors: Mapping[str, np.ndarray]) -> int:
    """Bits per weight: the ``trellis`` words per tile divided by 16."""
    require_dims(TITLE, tensors, ())
    if "trellis" not in tensors or np.ndim(tensors["trellis"]) != 3:
        raise LayoutError(f"{TITLE}: 'trellis' must be present and 3-D to read the bits per weight")
    return int(np.shape(tensors["trellis"])[2]) // 16


def validate_exl3(tensors: Mapping[str, np.ndarray], in_features: int, out_features: int) -> list[Violation]:
    """Every broken EXL3 rule for a ``[out, in]`` module (see the module docstring)."""
    found: list[Violation] = []
    if in_features % 128 or out_features % 128:
        found.append(
            Violation(f"{RULE}-DIMS", "config", "in and out divisible by 128", f"{in_features}, {out_features}")
        )
        return found
    for name in ("su", "sv"):
        if name in tensors:
            found.append(Violation(f"{RULE}-UNSUPPORTED", name, "suh / svh (Hadamard-side scales)", "present"))
    if "mcg" in tensors and "mul1" in tensors:
        found.append(Violation(f"{RULE}-CODEBOOK", "mcg", "one codebook marker", "both mcg and mul1"))
    width = int(np.shape(tensors["trellis"])[-1]) if "trellis" in tensors and np.ndim(tensors["trellis"]) else 0
    if "trellis" in tensors and (width % 16 or not 1 <= width // 16 <= 8):
        found.append(Violation(f"{RULE}-BITS", "trellis", "a last dim of 16*b words, b in 1..8", str(width)))
        return found
    specs = {
        "trellis": (("int16",), (in_features // 16, out_features // 16, width)),
        "suh": (SCALE_DTYPES, (in_features,)),
        "svh": (SCALE_DTYPES, (out_features,)),
    }
    if check_tensors(tensors, specs, RULE, found):
        for name in ("suh", "svh"):
            if not np.isfinite(np.asarray(tensors[name], dtype=np.float32)).all():
                found.append(Violation(f"{RULE}-SCALE-VALUE", name, "finite scales", "inf or nan"))
    return found


def unpack_exl3(tensors: Mapping[str, np.ndarray], in_features: int, out_features: int) -> EXL3Weight:
    """Read EXL3 tensors as an :class:`EXL3Weight`; raises :class:`LayoutError` listing every violation."""
    raise_on_violations(TITLE, validate_exl3(tensors, in_features, out_features))
    bits = bits_of(tensors)
    return EXL3Weight(
        unpack_symbols(np.asarray(tensors["trellis"]), bits),
        bits,
        codebook_of(tensors),
        np.array(tensors["suh"], copy=True),
        np.array(tensors["svh"], copy=True),
    )


def pack_exl3(weight: EXL3Weight) -> dict[str, np.ndarray]:
    """``weight`` as ``trellis``, ``suh``, ``svh`` and its codebook marker (a one-element int32 for ``mcg`` /
    ``mul1``; the reference reads only the marker's presence)."""
    tensors = {
        "trellis": pack_symbols(weight.symbols, weight.bits),
        "suh": np.array(weight.suh, copy=True),
        "svh": np.array(weight.svh, copy=True),
    }
    if weight.codebook != "3inst":
        tensors[weight.codebook] = np.zeros((1,), np.int32)
    return tensors
