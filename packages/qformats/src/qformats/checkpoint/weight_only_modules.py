"""Modules of weight-only checkpoint directories: FP8, bitsandbytes (NF4 / FP4 / int8) and GGUF blocks.

These directories (config ``method`` ``fp8`` / ``bitsandbytes`` / ``gguf``, the reference's weight-only export)
have no ``scales * (codes - zeros)`` modules, so :meth:`Checkpoint.modules` does not list them. Here a module
is a prefix owning the family's marker tensor, and its dims and stored type come from tensor shapes and the
config (dynamic overrides included):

* ``fp8``: marker ``weight_scale_inv``; ``weight [out, in]`` uint8 (FP8 bit patterns); the scale is ``[]``
  (``tensor``), ``[out]`` (``row``) or ``[ceil(out/br), ceil(in/bc)]`` (``block``).
* ``bitsandbytes`` 4-bit: marker ``weight_quant_map``; ``[out, in]`` from the ``weight_quant_state`` record.
* ``bitsandbytes`` int8: marker ``weight_scb``; ``weight [out, in]`` int8.
* ``gguf``: marker ``qweight`` uint8 ``[out, row bytes]``; the ggml type from ``bits`` + ``format`` after the
  module's dynamic override; ``in_features`` is the row length padded to whole blocks (the true width is
  not stored).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from math import ceil, prod
from typing import TYPE_CHECKING

import numpy as np

from ..config.dynamic import DynamicRules
from ..errors import QFormatsError
from ..layouts.families import family_by_marker, marker_suffixes, weight_only_methods
from ..layouts.gguf import tensor_type

if TYPE_CHECKING:
    from .reader import Checkpoint


@dataclass
class WeightOnlyModule:
    """One module: ``qtype`` names what it stores (``Q6_K``, ``float8_e4m3fn row``, ``nf4 block 64``, ``int8``);
    ``tensors``: local name -> ``[shape, dtype]``; ``nbytes``: its stored bytes (bias excluded)."""

    name: str
    qtype: str
    bits: int
    in_features: int
    out_features: int
    tensors: dict[str, list[object]]
    nbytes: int
    violations: list[str] = field(default_factory=list)


def is_weight_only(ck: Checkpoint) -> bool:
    """True when the checkpoint's config method is a weight-only family's (:func:`weight_only_methods`)."""
    return ck.fields.method in weight_only_methods()


def _members(ck: Checkpoint, prefix: str) -> dict[str, tuple[tuple[int, ...], str]]:
    found = {}
    for name in ck.weight_map:
        local = name[len(prefix) + 1 :]
        if name.startswith(prefix + ".") and "." not in local and (local == "qweight" or local.startswith("weight")):
            found[local] = ck.shape_of(name)
    return found


def _nbytes(shapes: dict[str, tuple[tuple[int, ...], str]]) -> int:
    return sum(prod(shape) * np.dtype(dtype).itemsize for shape, dtype in shapes.values())


def _gguf(ck: Checkpoint, prefix: str, shapes: dict[str, tuple[tuple[int, ...], str]]) -> WeightOnlyModule:
    fields = ck.fields
    rules = fields.config.dynamic if fields.config is not None else None
    if rules is not None and not isinstance(rules, DynamicRules):
        rules = DynamicRules.from_mapping(rules)
    override = rules.override(prefix) if rules is not None else {}
    bits = int(override.get("bits", fields.bits))
    fmt = str(override.get("format", fields.format))
    problems = []
    try:
        t = tensor_type(bits, fmt)
    except QFormatsError as exc:
        return WeightOnlyModule(prefix, "?", bits, 0, 0, _listed(shapes), _nbytes(shapes), [str(exc)])
    shape, dtype = shapes["qweight"]
    rows, row_bytes = shape if len(shape) == 2 else (0, 0)
    if dtype != "uint8":
        problems.append(f"qweight: expected uint8, found {dtype}")
    if len(shape) != 2 or row_bytes % t.type_size:
        problems.append(f"qweight: expected [out, whole {t.name} blocks of {t.type_size} bytes], found {list(shape)}")
    in_features = row_bytes // t.type_size * t.block_size
    return WeightOnlyModule(prefix, t.name, bits, in_features, rows, _listed(shapes), _nbytes(shapes), problems)


def _fp8(ck: Checkpoint, prefix: str, shapes: dict[str, tuple[tuple[int, ...], str]]) -> WeightOnlyModule:
    settings = dict(ck.fields.config.settings) if ck.fields.config is not None else {}
    method = str(settings.get("weight_scale_method", "row"))
    problems = []
    weight = shapes.get("weight")
    if weight is None or len(weight[0]) != 2:
        problems.append(f"weight: expected [out, in], found {None if weight is None else weight[0]}")
        out_features = in_features = 0
    else:
        out_features, in_features = weight[0]
    scale = tuple(shapes["weight_scale_inv"][0])
    if method == "block":
        rows, cols = settings.get("weight_block_size") or (1, 1)
        expected: tuple[tuple[int, ...], ...] = ((ceil(out_features / rows), ceil(in_features / cols)),)
    elif method == "tensor":
        expected = ((), (1,))
    else:
        expected = ((out_features,), (out_features, 1))
    if weight is not None and scale not in expected:
        problems.append(f"weight_scale_inv: expected {list(expected[0])} for {method} scales, found {list(scale)}")
    qtype = f"{ck.fields.format} {method}"
    return WeightOnlyModule(prefix, qtype, 8, in_features, out_features, _listed(shapes), _nbytes(shapes), problems)


def _bnb8(ck: Checkpoint, prefix: str, shapes: dict[str, tuple[tuple[int, ...], str]]) -> WeightOnlyModule:
    weight = shapes.get("weight", ((0, 0), "?"))
    out_features, in_features = weight[0] if len(weight[0]) == 2 else (0, 0)
    problems = [] if weight[1] == "int8" else [f"weight: expected int8 [out, in], found {weight[1]} {weight[0]}"]
    return WeightOnlyModule(prefix, "int8", 8, in_features, out_features, _listed(shapes), _nbytes(shapes), problems)


def _bnb4(ck: Checkpoint, prefix: str, shapes: dict[str, tuple[tuple[int, ...], str]]) -> WeightOnlyModule:
    problems = []
    out_features = in_features = 0
    qtype = "4-bit"
    if "weight_quant_state" not in shapes:
        problems.append("weight_quant_state: absent (the 4-bit record of quant type, block size and shape)")
    else:
        try:
            record = json.loads(ck.load(f"{prefix}.weight_quant_state").tobytes().decode("utf-8"))
            out_features, in_features = (int(v) for v in record["shape"])
            qtype = f"{record['quant_type']} block {record['blocksize']}"
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            problems.append(
                f"weight_quant_state: expected a JSON record with quant_type, blocksize, shape [out, in] ({exc})"
            )
    return WeightOnlyModule(prefix, qtype, 4, in_features, out_features, _listed(shapes), _nbytes(shapes), problems)


#: Weight-family key (:mod:`qformats.layouts.families`) -> how a module of it is summarized from the checkpoint.
_SUMMARIES = {"fp8": _fp8, "bnb4": _bnb4, "int8": _bnb8, "gguf": _gguf}


def _listed(shapes: dict[str, tuple[tuple[int, ...], str]]) -> dict[str, list[object]]:
    return {local: [list(shape), dtype] for local, (shape, dtype) in sorted(shapes.items())}


def weight_only_modules(ck: Checkpoint) -> list[WeightOnlyModule]:
    """Every weight-only module of ``ck`` (prefix order), with its stored type, dims, tensors and violations."""
    method = ck.fields.method
    markers = marker_suffixes(method)
    prefixes = sorted({name.rpartition(".")[0] for name in ck.weight_map if name.rpartition(".")[2] in markers})
    found = []
    for prefix in prefixes:
        shapes = _members(ck, prefix)
        family = family_by_marker(shapes, method)
        if family is None or family.key not in _SUMMARIES:
            raise QFormatsError(f"{prefix}: no weight-only family of method {method!r} marks tensors {sorted(shapes)}")
        found.append(_SUMMARIES[family.key](ck, prefix, shapes))
    return found


def module_tensor_names(ck: Checkpoint, modules: list[WeightOnlyModule]) -> set[str]:
    """The full names of every module's stored tensors (the rest of the checkpoint is dense)."""
    return {f"{m.name}.{local}" for m in modules for local in m.tensors}
