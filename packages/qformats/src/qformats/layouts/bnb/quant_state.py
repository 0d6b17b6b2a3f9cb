"""bitsandbytes 4-bit module tensors: the packed quant-state record and both naming schemes.

Tensors of one module (``*`` only when the statistics are nested):

=========================  ====================================  =======================================
reference toolkit name     Hugging Face / bitsandbytes name      content
=========================  ====================================  =======================================
``weight``                 ``weight``                            uint8 ``[ceil(n/2), 1]`` packed codes
``weight_absmax``          ``weight.absmax``                     float32 ``[nb]`` (uint8 when nested)
``weight_quant_map``       ``weight.quant_map``                  float32 ``[16]``
``weight_nested_absmax``   ``weight.nested_absmax`` *            float32 ``[ceil(nb/256)]``
``weight_nested_quant_map`` ``weight.nested_quant_map`` *        float32 ``[256]``
``weight_quant_state``     ``weight.quant_state.bitsandbytes__<t>``  uint8 UTF-8 JSON record
=========================  ====================================  =======================================

The JSON record is ``json.dumps`` of ``{"quant_type", "blocksize", "dtype", "shape"}`` followed, when
nested, by ``{"nested_blocksize", "nested_dtype", "nested_offset"}`` (bitsandbytes' key order and
default separators), so its length depends on the values.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...errors import LayoutError
from ...violations import Violation
from .quant4 import BnB4Weight, NestedStats

NAMINGS = ("reference", "hf")
_FIELDS = ("absmax", "quant_map", "nested_absmax", "nested_quant_map")


def _name(field: str, naming: str, quant_type: str) -> str:
    if naming == "reference":
        return "weight_quant_state" if field == "quant_state" else f"weight_{field}"
    if naming == "hf":
        return f"weight.quant_state.bitsandbytes__{quant_type}" if field == "quant_state" else f"weight.{field}"
    raise LayoutError(f"naming: expected one of {NAMINGS}, found {naming!r}")


def quant_state_record(weight: BnB4Weight) -> dict[str, Any]:
    """The non-tensor part of the quant state, in bitsandbytes' key order."""
    record: dict[str, Any] = {
        "quant_type": weight.quant_type,
        "blocksize": weight.blocksize,
        "dtype": weight.dtype,
        "shape": list(weight.shape),
    }
    if weight.nested is not None:
        record.update(
            nested_blocksize=weight.nested.blocksize,
            nested_dtype=weight.nested.dtype,
            nested_offset=weight.nested.offset,
        )
    return record


def pack_bnb4(weight: BnB4Weight, *, naming: str = "reference") -> dict[str, np.ndarray]:
    """The module tensors of ``weight`` under ``naming`` (``"reference"`` or ``"hf"``); copies."""
    tensors = {"weight": weight.packed.copy(), _name("absmax", naming, weight.quant_type): weight.absmax.copy()}
    tensors[_name("quant_map", naming, weight.quant_type)] = weight.quant_map.copy()
    if weight.nested is not None:
        tensors[_name("nested_absmax", naming, weight.quant_type)] = weight.nested.absmax.copy()
        tensors[_name("nested_quant_map", naming, weight.quant_type)] = weight.nested.quant_map.copy()
    record = json.dumps(quant_state_record(weight)).encode("utf-8")
    tensors[_name("quant_state", naming, weight.quant_type)] = np.frombuffer(record, dtype=np.uint8).copy()
    return tensors


def detect_naming(tensors: Mapping[str, np.ndarray]) -> tuple[str, str]:
    """(naming, quant-state key) of a module's 4-bit tensors."""
    if "weight_quant_state" in tensors:
        return "reference", "weight_quant_state"
    keys = [k for k in tensors if k.startswith("weight.quant_state.bitsandbytes__")]
    if len(keys) == 1:
        return "hf", keys[0]
    raise LayoutError(
        "weight_quant_state: expected 'weight_quant_state' or one 'weight.quant_state.bitsandbytes__<type>', "
        f"found {sorted(k for k in tensors if 'quant_state' in k) or 'neither'}"
    )


def _record(tensors: Mapping[str, np.ndarray], key: str) -> dict[str, Any]:
    raw = np.asarray(tensors[key])
    if raw.dtype != np.uint8 or raw.ndim != 1:
        raise LayoutError(f"{key}: expected 1-D uint8 packed JSON, found {raw.dtype} {raw.shape}")
    try:
        record = json.loads(raw.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LayoutError(f"{key}: not a UTF-8 JSON quant-state record ({exc})") from None
    if not isinstance(record, dict):
        raise LayoutError(f"{key}: expected a JSON object, found {type(record).__name__}")
    return record


def validate_bnb4(tensors: Mapping[str, np.ndarray]) -> list[Violation]:
    """Every broken rule of a 4-bit module's tensors (names, record fields, shapes)."""
    try:
        naming, key = detect_naming(tensors)
        record = _record(tensors, key)
    except LayoutError as exc:
        return [Violation("BNB4-STATE", "weight_quant_state", "a packed quant-state record", str(exc))]
    found: list[Violation] = []
    for field in ("quant_type", "blocksize", "dtype", "shape"):
        if field not in record:
            found.append(Violation("BNB4-RECORD", key, f"field {field!r}", "absent"))
    qt = record.get("quant_type")
    if naming == "hf" and qt is not None and not key.endswith(f"__{qt}"):
        found.append(Violation("BNB4-RECORD", key, f"suffix __{qt}", key.rsplit("__", 1)[-1]))
    nested = "nested_offset" in record
    needed = ["weight", *(_name(f, naming, str(qt)) for f in _FIELDS[: 4 if nested else 2])]
    for name in needed:
        if name not in tensors:
            found.append(Violation("BNB4-MISSING", name, "present", "absent"))
    if found:
        return found
    try:
        unpack_bnb4(tensors)
    except LayoutError as exc:
        found.append(Violation("BNB4-SHAPE", "weight", "tensors consistent with the record", str(exc)))
    return found


def unpack_bnb4(tensors: Mapping[str, np.ndarray]) -> BnB4Weight:
    """Read a module's 4-bit tensors (either naming) as a :class:`BnB4Weight`."""
    naming, key = detect_naming(tensors)
    record = _record(tensors, key)
    try:
        qt, blocksize = str(record["quant_type"]), int(record["blocksize"])
        shape, dtype = tuple(int(d) for d in record["shape"]), str(record["dtype"])
    except (KeyError, TypeError, ValueError) as exc:
        raise LayoutError(f"{key}: quant-state record lacks or mangles a field ({exc!r})") from None

    def get(field: str) -> np.ndarray:
        name = _name(field, naming, qt)
        if name not in tensors:
            raise LayoutError(f"{name}: expected for a {qt} quant state, found absent")
        return np.asarray(tensors[name])

    nested = None
    if "nested_offset" in record:
        nested = NestedStats(
            get("nested_absmax"),
            get("nested_quant_map"),
            float(record["nested_offset"]),
            int(record.get("nested_blocksize", 256)),
            str(record.get("nested_dtype", "float32")),
        )
    if "weight" not in tensors:
        raise LayoutError("weight: expected the packed uint8 codes, found absent")
    packed = np.asarray(tensors["weight"])
    return BnB4Weight(packed, get("absmax"), get("quant_map"), qt, blocksize, shape, dtype, nested)
