"""The quantization config a checkpoint stores: the dict written to both ``quantize_config.json`` and
``config.json["quantization_config"]``, from the run's resolved :class:`~qformats.config.QuantizeConfig`.

``method`` and ``quant_method``, ``format`` and ``checkpoint_format``, ``pack_dtype`` as a string, AWQ's
``zero_point``/``version``, QQQ's ``wbits``, ParoQuant's ``krot`` and ``opt_*``, the ``dynamic`` per-module
rules when the config has them (after ``bits``), and a ``meta`` block naming the quantizer and the calibrated
settings (``damp_percent`` ... and a ``gptaq`` / ``foem`` section), as the reference writes them, plus lowbit's
``awq_scales: true`` when GPTQ solved AWQ-scaled weights (absent otherwise); a mixed-precision run adds lowbit's
``bits_budget`` / ``bits_candidates`` (:mod:`qhf.mixed_precision`). The run's calibration record (not a setting)
goes to ``meta.calibration``, its folded rotation's record (:mod:`qhf.rotation.fold_source`) to ``meta.rotation``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from qformats.config import QuantizeConfig

from . import __version__
from .config_view import (
    adapter,
    algorithm,
    awq_scales,
    bits_budget,
    checkpoint_method,
    gguf_dynamic,
    is_weight_only,
    method_of,
    setting,
    solver_variant,
)
from .methods.registry import find_method
from .weight_only import weight_family

QUANTIZER = f"lowbit-qhf:{__version__}"


def _weight_only_dict(cfg: QuantizeConfig) -> dict[str, Any]:
    """The reference's serialized FP8 / bitsandbytes / GGUF config (GGUF drops group_size, desc_act,
    pack_dtype; FP8 and bitsandbytes write them as -1, False, int32)."""
    method = algorithm(cfg)
    group_fields = method_of(cfg).stores_group_fields
    out: dict[str, Any] = {"bits": cfg.width}
    if group_fields:
        out.update(group_size=-1, desc_act=False)
    out.update(
        lm_head=cfg.lm_head, method=method, quant_method=method, format=cfg.format, checkpoint_format=cfg.format,
    )  # fmt: skip
    if group_fields:
        out["pack_dtype"] = cfg.pack_dtype
    out["meta"] = {"quantizer": [QUANTIZER], "algorithm": method}
    fields = weight_family(cfg).config_fields  # the family's own stored fields (FP8 scheme, bitsandbytes blocks)
    if fields is not None:
        out.update(fields(cfg))
    dynamic = gguf_dynamic(cfg)
    if dynamic:
        out["dynamic"] = {key: dict(value) for key, value in dynamic.items()}
    return out


def kept_dense_fields(parts: Sequence[str]) -> dict[str, Any]:
    """A vision-language checkpoint's record of the subtrees kept dense (``parts``: ``model.visual``;
    ``model.vision_tower``, ``model.multi_modal_projector``): ``dynamic`` negative rules, one per part
    (``-:^(?:model\\.)?visual\\b``, the part and every module in it: GPT-QModel's and vLLM's GPTQ loaders keep
    matching modules dense; the optional parent also matches the names of hub checkpoints and vLLM's modules,
    ``visual.``) and ``modules_to_not_convert`` with each part's own name (``visual``: transformers' and vLLM's
    AWQ loaders keep modules whose name contains one dense). Empty for no parts."""
    if not parts:
        return {}
    rules: dict[str, dict[str, Any]] = {}
    for part in parts:
        parent, _, leaf = part.rpartition(".")
        optional = f"(?:{re.escape(parent)}\\.)?" if parent else ""
        rules[f"-:^{optional}{re.escape(leaf)}\\b"] = {}
    return {"dynamic": rules, "modules_to_not_convert": [part.rpartition(".")[2] for part in parts]}


def checkpoint_dict(
    cfg: QuantizeConfig,
    calibration: dict[str, Any] | None = None,
    rotation: dict[str, Any] | None = None,
    dense_parts: Sequence[str] = (),
) -> dict[str, Any]:
    """The stored config of a run on ``cfg`` (see the module docstring); ``calibration``: the run's record
    of its default calibration mixture (``meta.calibration``), or None; ``rotation``: the run's folded rotation
    record (``meta.rotation``), or None; ``dense_parts``: a vision-language model's subtrees kept dense
    (:func:`kept_dense_fields`; not written for the weight-only methods)."""
    if is_weight_only(cfg):
        return _weight_only_dict(cfg)
    quant_method = method_of(cfg)
    method = checkpoint_method(cfg)
    out: dict[str, Any] = {"bits": cfg.width}
    if cfg.rules is not None:  # per-module overrides (a mixed-precision run's widths), in the reference's place
        out["dynamic"] = cfg.rules.to_mapping()
    out.update({
        "group_size": cfg.group_size,
        "desc_act": bool(cfg.desc_act),
        "lm_head": cfg.lm_head,
        "method": method,
        "quant_method": method,
        "format": cfg.format,
        "checkpoint_format": cfg.format,
        "pack_dtype": cfg.pack_dtype,
        "meta": {
            "quantizer": [QUANTIZER],
            "algorithm": algorithm(cfg),
            **quant_method.meta_settings(cfg),  # the calibrated methods' META_SETTINGS
        },
    })  # fmt: skip
    variant = solver_variant(cfg)
    if variant is not None:
        name, values = variant
        out["meta"][name] = {**values, "device": "auto"}
    if awq_scales(cfg):  # lowbit's recipe (a plain GPTQ checkpoint; the scales are folded into the norms)
        out["meta"]["awq_scales"] = True
    eora = adapter(cfg)
    if eora is not None:
        out["adapter"] = eora
    if calibration:
        out["meta"]["calibration"] = dict(calibration)
    if rotation:
        out["meta"]["rotation"] = dict(rotation)
    stored = find_method(method) or quant_method  # the method the checkpoint is stored under (RTN: gptq / awq)
    top, meta = stored.stored_layout_fields(cfg)  # GPTQ's sym, AWQ's zero_point + version, QQQ's wbits ...
    out.update(top)
    out["meta"].update(meta)
    out.update(quant_method.checkpoint_fields(cfg))  # a third-party method's settings ({} for the built-ins)
    dense = kept_dense_fields(dense_parts)
    if dense:  # the dense parts' negative rules join the run's own (a mixed-precision run's widths)
        out["dynamic"] = {**out.get("dynamic", {}), **dense["dynamic"]}
        out["modules_to_not_convert"] = dense["modules_to_not_convert"]
    budget = bits_budget(cfg)
    if budget is not None:  # lowbit's own fields (GPT-QModel and vLLM ignore them); the widths are in dynamic
        out["bits_budget"] = cfg.settings["bits_budget"]
        out["bits_candidates"] = list(setting(cfg, "bits_candidates"))
    return out
