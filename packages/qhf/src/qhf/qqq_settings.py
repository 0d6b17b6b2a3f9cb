"""QQQ (W4A8) settings: the reference's defaults and what its recipe and kernels accept.

QQQ is GPTQ's solve on QQQ's 4-bit grids (:mod:`qalgos.qqq`), saved in the ``qqq`` layout. The reference
(GPT-QModel 7.7.0 ``QQQConfig``) defaults ``damp_percent`` to 0.005 and ``damp_auto_increment`` to 0.001,
writes ``wbits`` beside ``bits`` (vLLM's QQQ loader reads it) and refuses ``desc_act``; its QQQ kernels
(``QQQLinear`` / ``QQQTorchLinear``, and vLLM's) take ``group_size`` -1 or 128 and in/out features divisible
by 64 (``qformats.family_shapes``, the QQQ family's ``shape_problem``). lowbit refuses anything else before
any work, naming the module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qformats.config import QuantizeConfig

DEFAULTS = {"damp_percent": 0.005, "damp_auto_increment": 0.001}
GROUP_SIZES = (-1, 128)


def qqq_problem(config: QuantizeConfig, settings: Mapping[str, Any]) -> str | None:
    """Why a QQQ run on ``config`` with the calibrated ``settings`` (:mod:`qhf.calibrated_settings`) is not a QQQ
    recipe, naming the field."""
    if config.bits != 4:
        return f"bits: QQQ stores 4-bit weights, found {config.bits!r}"
    if not config.sym:
        return "sym: QQQ is symmetric (codes around the fixed zero 8), found sym=False"
    if config.desc_act:
        return "desc_act: QQQ has no g_idx tensor, so act-order cannot be stored (the reference refuses it too)"
    if settings["act_group_aware"]:
        return "act_group_aware: the reference's QQQ solve visits columns in natural order; leave it unset"
    if config.group_size not in GROUP_SIZES:
        return f"group_size: the QQQ kernels take -1 (per channel) or 128, found {config.group_size!r}"
    if settings["mse"]:
        return f"mse: lowbit's QQQ has no shrink search (use 0), found {settings['mse']!r}"
    return None
