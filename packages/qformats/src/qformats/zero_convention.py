"""Which zero-point convention a GPTQ-family checkpoint's stored zeros are consistent with.

GPTQ ``v1`` files store ``zero - 1`` in every qzeros field; ``v2`` (and planar) files store the true zero.
The ``format`` label in a config can lie (a v2 file labelled v1 gives garbage in engines), so this
module looks at the words themselves:

* **Symmetric** weights have true zero ``2**(bits-1)`` everywhere, so the fields decide it: all fields
  ``2**(bits-1)`` -> v2, all ``2**(bits-1) - 1`` -> v1 (confidence ``"certain"``).
* **Asymmetric** weights: for real LLM weights the codes of a group centre on the true zero (the
  weights centre on 0), so the mean over all groups of ``mean(code) - field`` is near 0 for v2 and
  near 1 for v1. The verdict carries that offset and its standard error; ``"high"`` confidence needs
  the offset within 0.25 of one convention and more than 6 standard errors from the midpoint 0.5.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .errors import LayoutError
from .layouts.registry import LayoutMeta, get_layout

V1 = "v1"
V2 = "v2"
UNDECIDED = "undecided"


@dataclass(frozen=True)
class ZeroConventionReport:
    """The verdict: ``convention`` (``"v1"``, ``"v2"`` or ``"undecided"``), how sure, and why."""

    convention: str
    confidence: str  # "certain", "high", "low" or "none"
    evidence: str
    mean_offset: float | None = None
    labelled: str | None = None

    @property
    def label_disagrees(self) -> bool:
        """True when a label was given and the evidence confidently names the other convention."""
        if self.labelled is None or self.convention == UNDECIDED or self.confidence not in ("certain", "high"):
            return False
        return self.convention != label_convention(self.labelled)


def label_convention(fmt: str) -> str:
    """The convention a format label promises: ``gptq`` -> v1; ``gptq_v2``/``gptq_p`` -> v2."""
    return V1 if str(fmt) == "gptq" else V2


def _raw_fields(
    tensors: Mapping[str, np.ndarray], meta: LayoutMeta, planar: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(codes [out, in], fields [G, out], g_idx [in])`` with the stored zero fields taken verbatim (no +1)."""
    layout = get_layout("gptq_p" if planar else "gptq_v2")
    weight = layout.unpack(
        tensors, LayoutMeta(meta.bits, meta.group_size, meta.in_features, meta.out_features, False, meta.pack_dtype)
    )
    return weight.codes, weight.zeros, weight.g_idx


def detect_zero_convention(
    tensors: Mapping[str, np.ndarray],
    meta: LayoutMeta,
    *,
    labelled: str | None = None,
    planar: bool = False,
) -> ZeroConventionReport:
    """Judge the convention of one module's GPTQ tensors (``qweight``, ``qzeros``, ``scales``[, ``g_idx``])."""
    try:
        codes, fields, g_idx = _raw_fields(tensors, meta, planar)
    except LayoutError as exc:
        return ZeroConventionReport(UNDECIDED, "none", f"tensors unreadable as GPTQ words: {exc}", None, labelled)
    mid = 1 << (meta.bits - 1)
    if fields.size and bool(np.all(fields == mid)):
        return ZeroConventionReport(
            V2, "certain", f"every zero field is {mid} = 2**(bits-1) (symmetric, true zero)", 0.0, labelled
        )
    if fields.size and bool(np.all(fields == mid - 1)):
        evidence = f"every zero field is {mid - 1} = 2**(bits-1) - 1 (symmetric, stored zero - 1)"
        return ZeroConventionReport(V1, "certain", evidence, 1.0, labelled)
    return _statistical_verdict(codes, fields, g_idx, labelled)


def _statistical_verdict(
    codes: np.ndarray, fields: np.ndarray, g_idx: np.ndarray, labelled: str | None
) -> ZeroConventionReport:
    groups = fields.shape[0]
    counts = np.bincount(g_idx, minlength=groups).astype(np.float64)  # [G]
    sums = np.zeros((groups, codes.shape[0]), dtype=np.float64)
    np.add.at(sums, g_idx, codes.T.astype(np.float64))
    present = counts > 0
    means = sums[present] / counts[present, None]  # [G', out]
    diffs = (means - fields[present].astype(np.float64)).ravel()
    if diffs.size < 2:
        return ZeroConventionReport(
            UNDECIDED, "none", "too few groups to judge an asymmetric checkpoint", None, labelled
        )
    offset = float(diffs.mean())
    stderr = float(diffs.std(ddof=1) / np.sqrt(diffs.size)) or 1e-12
    convention = V2 if offset < 0.5 else V1
    distance = min(abs(offset), abs(offset - 1.0))
    sigmas = abs(offset - 0.5) / stderr
    confidence = "high" if distance <= 0.25 and sigmas > 6 else "low"
    evidence = (
        f"mean(code) - stored zero over {diffs.size} groups = {offset:.3f} (+/- {stderr:.3f}); "
        f"about 0 means true zeros (v2), about 1 means zero - 1 (v1)"
    )
    return ZeroConventionReport(convention, confidence, evidence, offset, labelled)
