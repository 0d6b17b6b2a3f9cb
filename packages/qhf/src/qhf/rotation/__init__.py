"""Rotations folded into the weights (QuaRot / SpinQuant-style incoherence processing without an online transform).

The residual stream is rotated by an orthogonal ``Q`` and each attention head's values by ``H``; every norm's
scale is folded into the linears that read it, so the quantized checkpoint stays a plain model of the same layout.
:mod:`~qhf.rotation.setting` (the config), :mod:`~qhf.rotation.plan` (which tensor, which rewrite),
:mod:`~qhf.rotation.fold` (the arithmetic), :mod:`~qhf.rotation.check` (verified on a float64 replica first),
:mod:`~qhf.rotation.fold_source` (deciding and installing it on a source).
"""

from .fold_source import PreparedRotation, install_rotation, prepare_rotation
from .setting import configured_rotation, is_rotated, resolve_rotation

__all__ = [
    "PreparedRotation",
    "configured_rotation",
    "install_rotation",
    "is_rotated",
    "prepare_rotation",
    "resolve_rotation",
]
