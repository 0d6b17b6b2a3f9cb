"""Checks of a checkpoint's values and names beyond each layout's shape/dtype rules.

Rule ids (reported by :meth:`Checkpoint.validate` and so by ``inspect``; a load refuses the first two
kinds of module by name):

* ``VALUE-SCALES``      a module's scales hold NaN, Inf or 0 (dequantization would give NaN/Inf/0 rows).
* ``VALUE-SYM-ZEROS``   a module under a ``sym`` config whose true zeros are not ``2**(bits-1)``.
* ``CONFIG-LAYERS``     ``config.json``'s ``num_hidden_layers`` (``decoder_layers`` for ``...decoder.layers.N``)
                        disagrees with the layer indices of the tensors.

:func:`unknown_tensors` lists tensors of a quantized module that are neither layout tensors nor its
``bias`` (the reader would otherwise ignore them silently); the reader records them as warnings.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from ..logical import QuantizedWeight
from ..violations import Violation
from .contained import inside_directory
from .modules import ModuleEntry, split_name

SCALES_RULE = "VALUE-SCALES"
SYM_ZEROS_RULE = "VALUE-SYM-ZEROS"
LAYERS_RULE = "CONFIG-LAYERS"
_LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def weight_value_violations(weight: QuantizedWeight) -> list[Violation]:
    """Non-finite or zero scales, and zeros that break ``sym``, of one logical weight."""
    found = []
    scales = np.asarray(weight.scales, dtype=np.float32)
    bad = ~np.isfinite(scales)
    if bad.any():
        found.append(Violation(SCALES_RULE, "scales", "finite values", f"{int(bad.sum())} NaN/Inf value(s)"))
    zero = scales == 0
    if zero.any():
        found.append(Violation(SCALES_RULE, "scales", "non-zero values", f"{int(zero.sum())} zero value(s)"))
    if weight.sym:
        mid = 1 << (weight.bits - 1)
        off = np.asarray(weight.zeros) != mid
        if off.any():
            found.append(
                Violation(SYM_ZEROS_RULE, "qzeros", f"every true zero {mid} (sym config)", f"{int(off.sum())} other")
            )
    return found


def unknown_tensors(names: Iterable[str], modules: Iterable[ModuleEntry]) -> list[str]:
    """Tensors under a quantized module's prefix that are neither that module's tensors (its layout's, or
    its family's: QQQ, ParoQuant, VPTQ, EXL3) nor ``bias``."""
    owned = {entry.prefix: set(entry.tensors.values()) for entry in modules}
    return [
        name
        for name in names
        if split_name(name)[0] in owned and split_name(name)[1] != "bias" and name not in owned[split_name(name)[0]]
    ]


def layer_count_violation(root: Path, names: Iterable[str]) -> Violation | None:
    """``CONFIG-LAYERS`` when ``config.json``'s layer count disagrees with the tensors' layers.

    The count of a layer list ``<...>.<part>.layers.N`` is the config field ``<part>_layers`` or
    ``num_<part>_layers`` where ``config.json`` (or its ``text_config``) holds one (an encoder-decoder's
    ``model.decoder.layers``: ``decoder_layers``); every other list is counted by ``num_hidden_layers`` (the
    highest index of them all)."""
    path = root / "config.json"
    if not os.path.lexists(path):
        return None
    inside_directory(root, "config.json")  # outside the directory, or not a regular file: refused by name
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None  # the config reader reports an unreadable config.json by name
    by_field: dict[str, set[int]] = {}
    for name in names:
        found = _LAYER_INDEX.search(name)
        if found is not None:
            by_field.setdefault(_count_field(data, name[: found.start()]), set()).add(int(found.group(1)))
    for field in sorted(by_field):
        declared = _declared_layers(data, field)
        if declared is None:
            continue
        held = max(by_field[field]) + 1
        if held != declared:
            return Violation(
                LAYERS_RULE, f"config.json:{field}", f"{held} (layers 0..{held - 1} in the tensors)", str(declared)
            )
    return None


def _count_field(data: object, container: str) -> str:
    """The config field counting the layer list under ``container`` (the name before ``.layers.N``)."""
    for part in reversed([p for p in container.split(".") if p and not p.isdigit()]):
        for field in (f"{part}_layers", f"num_{part}_layers"):
            if _declared_layers(data, field) is not None:
                return field
    return "num_hidden_layers"


def _declared_layers(data: object, field: str) -> int | None:
    if not isinstance(data, Mapping):
        return None
    value = data.get(field)
    if value is None and isinstance(data.get("text_config"), Mapping):
        value = data["text_config"].get(field)
    return value if isinstance(value, int) and not isinstance(value, bool) else None
