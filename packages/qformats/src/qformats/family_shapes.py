"""Which linear shapes ``[out, in]`` a weight family can hold under a resolved config, before any work.

Each function is one family's ``WeightFamily.shape_problem`` (wired up in
:mod:`qformats.layouts.builtin_families`): ``None`` when the family holds the shape, else the text a refusal
puts after the module's name (the dims and settings that matter, then ``": "`` and the reason), so a caller
writes ``f"method {family.method!r} cannot hold {module}{problem}"``. The ``integer`` family has none: its
layout's ``cannot_represent`` decides (``qhf.looper_bridge.preflight`` probes it).

* ``qqq``: the QQQ kernels (the reference's and vLLM's) need in / out divisible by :data:`QQQ_FEATURE_MULTIPLE`
  and no partial group.
* ``paroquant``: the rotation groups are of an even size dividing ``in_features``.
* ``fp8``: block scaling needs the block ``[rows, cols]`` to divide ``[out, in]``.
"""

from __future__ import annotations

from .config.model import QuantizeConfig
from .errors import LayoutError
from .layouts.paroquant.rotation import rotation_group_size

QQQ_FEATURE_MULTIPLE = 64


def qqq_module_problem(group_size: int, out_features: int, in_features: int) -> str | None:
    """Why a linear ``[out, in]`` cannot be a QQQ module at ``group_size`` (None when it can)."""
    if in_features % QQQ_FEATURE_MULTIPLE or out_features % QQQ_FEATURE_MULTIPLE:
        return (
            f"the QQQ kernels need in_features and out_features divisible by {QQQ_FEATURE_MULTIPLE}; "
            f"found in={in_features}, out={out_features}"
        )
    if group_size != -1 and in_features % group_size:
        return (
            f"in_features {in_features} is not divisible by group_size {group_size} (QQQ has no partial groups); "
            "use group_size -1 (per channel)"
        )
    return None


def qqq_shape_problem(config: QuantizeConfig, out_features: int, in_features: int) -> str | None:
    """QQQ: the kernels' multiples and whole groups."""
    reason = qqq_module_problem(config.group_size, out_features, in_features)
    if reason is None:
        return None
    return f" [{out_features} x {in_features}] at group {config.group_size}: {reason}"


def paroquant_shape_problem(config: QuantizeConfig, out_features: int, in_features: int) -> str | None:
    """ParoQuant: an even rotation group dividing ``in_features``."""
    try:
        rotation_group_size(config.group_size, in_features)
    except LayoutError as exc:
        return f" [{out_features} x {in_features}]: {exc}"
    return None


def fp8_shape_problem(config: QuantizeConfig, out_features: int, in_features: int) -> str | None:
    """FP8: a block scaling's ``weight_block_size`` must divide ``[out, in]``."""
    block = config.settings.get("weight_block_size")
    if block is None:
        return None
    rows, cols = block
    if out_features % rows or in_features % cols:
        return f": weight_block_size {[rows, cols]} must divide [out, in] = [{out_features}, {in_features}]"
    return None
