"""Checks of a checkpoint's tensors outside its quantized modules (dense weights and stray layout tensors).

Rule ids (reported by :meth:`Checkpoint.validate`, so by ``inspect``, and refused by every loader through
:meth:`Checkpoint.require_valid`):

* ``VALUE-DENSE``     a dense floating tensor holds NaN/Inf, or a dense floating weight matrix (a ``weight``
  with at least two dimensions, each longer than 1) is all zeros (an embedding or head of zeros gives a model
  that runs and says nothing useful). Vectors stored as ``[1, n]`` and tensors other than ``weight`` (a MoE
  router's ``e_score_correction_bias`` starts at zero) may be zero.
* ``LAYOUT-ORPHAN``   a quantized module's tensor (``scales``, ``qzeros``, ``g_idx`` ...) under a name that
  owns no marker tensor (``qweight`` ...): the marker was deleted, or the tensor was misplaced.

Reading each dense tensor also verifies its recorded crc32 (:class:`~.safetensors_io.SafetensorsFile`),
so a flipped byte in ``embed_tokens`` or ``lm_head`` is refused by name. :func:`unexpected_names` lists
dense tensors that are neither a ``weight``, a ``bias`` nor a known buffer, for a warning.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from ..violations import Violation
from .modules import LAYOUT_SUFFIXES, ModuleEntry, split_name

DENSE_RULE = "VALUE-DENSE"
ORPHAN_RULE = "LAYOUT-ORPHAN"
#: Local names a dense tensor of a transformers model commonly has (anything else gets a warning).
EXPECTED_DENSE = frozenset({"weight", "bias", "inv_freq", "e_score_correction_bias"})


def dense_value_violations(name: str, array: np.ndarray) -> list[Violation]:
    """``VALUE-DENSE`` findings of one dense tensor (only floating tensors are checked)."""
    if array.dtype.kind != "f" or array.size == 0:
        return []
    bad = int(np.count_nonzero(~np.isfinite(array)))
    if bad:
        return [Violation(DENSE_RULE, name, "finite values", f"{bad} NaN/Inf value(s)")]
    matrix = array.ndim >= 2 and min(array.shape) > 1 and split_name(name)[1] == "weight"
    if matrix and not np.any(array):
        return [Violation(DENSE_RULE, name, "a matrix with non-zero values", f"all {array.size} values zero")]
    return []


def dense_violations(names: Iterable[str], load: Callable[[str], np.ndarray]) -> dict[str, list[Violation]]:
    """``{tensor name: findings}`` of every dense tensor in ``names`` (each loaded, crc32 verified, once)."""
    found: dict[str, list[Violation]] = {}
    for name in names:
        problems = dense_value_violations(name, load(name))
        if problems:
            found[name] = problems
    return found


def orphan_violations(dense: Iterable[str], modules: Iterable[ModuleEntry], markers: Iterable[str]) -> list[Violation]:
    """``LAYOUT-ORPHAN`` for each dense tensor named like a quantized module's tensor under a prefix that owns
    no marker (``markers``: the marker tensors of modules kept dense by a rule, reported on their own)."""
    owned = {split_name(n)[0] for n in markers}
    suffixes = (LAYOUT_SUFFIXES | {split_name(n)[1] for e in modules for n in e.tensors.values()}) - EXPECTED_DENSE
    return [
        Violation(ORPHAN_RULE, name, f"a {split_name(name)[0]}.qweight (or no {split_name(name)[1]})", "no marker")
        for name in dense
        if split_name(name)[1] in suffixes and split_name(name)[0] not in owned
    ]


def unexpected_names(dense: Iterable[str]) -> list[str]:
    """Dense tensors whose local name is not one a model's dense module holds (see :data:`EXPECTED_DENSE`)."""
    return [name for name in dense if split_name(name)[1] not in EXPECTED_DENSE]
