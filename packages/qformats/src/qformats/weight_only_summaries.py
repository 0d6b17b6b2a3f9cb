"""How one module of a weight-only directory (FP8, bitsandbytes NF4 / FP4 / int8, GGUF blocks) is summarized.

Each function is one weight-only family's ``WeightFamily.summary`` (wired up in
:mod:`qformats.layouts.builtin_families`; :func:`qformats.checkpoint.weight_only_modules.weight_only_modules`
calls it for every module). It takes the checkpoint (its ``fields`` and, for bitsandbytes 4-bit, ``load``),
the module prefix and ``shapes`` (local name -> ``(shape, dtype)``) and gives a :class:`WeightOnlyModule`;
dims and the stored type come from tensor shapes and the config (dynamic overrides included):

* ``fp8``: ``weight [out, in]`` uint8 (FP8 bit patterns); the scale ``weight_scale_inv`` is ``[]``
  (``tensor``), ``[out]`` (``row``) or ``[ceil(out/br), ceil(in/bc)]`` (``block``).
* ``bnb4``: ``[out, in]`` from the ``weight_quant_state`` record.
* ``int8``: ``weight [out, in]`` int8.
* ``gguf``: ``qweight`` uint8 ``[out, row bytes]``; the ggml type from ``bits`` + ``format`` after the
  module's dynamic override; ``in_features`` is the row length padded to whole blocks (the true width is
  not stored).

Nothing here imports :mod:`qformats.checkpoint` (the registry loads this module on first lookup).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from math import ceil, prod
from typing import Any

import numpy as np

from .config.dynamic import DynamicRules
from .errors import QFormatsError
from .layouts.gguf import tensor_type

INT8 = np.dtype(np.int8).name  # the stored dtype of a bitsandbytes int8 ``weight``
Shapes = Mapping[str, tuple[tuple[int, ...], str]]


def weight_only_member(local: str) -> bool:
    """Whether a local tensor name belongs to a weight-only module: ``qweight`` or ``weight*``, no dot."""
    return "." not in local and (local == "qweight" or local.startswith("weight"))


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


def _nbytes(shapes: Shapes) -> int:
    return sum(prod(shape) * np.dtype(dtype).itemsize for shape, dtype in shapes.values())


def summarize_gguf(ck: Any, prefix: str, shapes: Shapes) -> WeightOnlyModule:
    """A GGUF module: its ggml type, padded dims and the ``qweight`` row checks."""
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


def summarize_fp8(ck: Any, prefix: str, shapes: Shapes) -> WeightOnlyModule:
    """An FP8 module: ``weight [out, in]`` and the scale shape its scale method needs."""
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


def summarize_int8(ck: Any, prefix: str, shapes: Shapes) -> WeightOnlyModule:
    """A bitsandbytes int8 module: ``weight`` int8 ``[out, in]``."""
    weight = shapes.get("weight", ((0, 0), "?"))
    out_features, in_features = weight[0] if len(weight[0]) == 2 else (0, 0)
    problems = [] if weight[1] == INT8 else [f"weight: expected int8 [out, in], found {weight[1]} {weight[0]}"]
    return WeightOnlyModule(prefix, "int8", 8, in_features, out_features, _listed(shapes), _nbytes(shapes), problems)


def summarize_bnb4(ck: Any, prefix: str, shapes: Shapes) -> WeightOnlyModule:
    """A bitsandbytes 4-bit module: quant type, block size and dims from ``weight_quant_state``."""
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


def _listed(shapes: Shapes) -> dict[str, list[object]]:
    return {local: [list(shape), dtype] for local, (shape, dtype) in sorted(shapes.items())}
