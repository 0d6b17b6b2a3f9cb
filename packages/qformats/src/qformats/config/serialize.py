"""Writing a :class:`~qformats.config.model.QuantizeConfig` as the JSON object readers expect.

Output (reference ``to_dict`` order and naming): ``bits``, ``dynamic``, ``group_size``, ``desc_act``,
``sym`` (GPTQ-style families), ``lm_head``, ``method`` **and** ``quant_method``, ``format`` **and**
``checkpoint_format``, ``pack_dtype``; AWQ adds ``zero_point`` (= not sym) and ``version`` (= format);
QQQ adds ``wbits`` (= bits, the name vLLM's QQQ loader reads);
then carried ``settings``, ``meta`` (with ``qformats_config_version``) and every ``unknown`` field
read from the source file. ``None`` and empty values are dropped. GGUF writes its bits alias
(``q4_k_m``) and drops group_size/desc_act/pack_dtype. Dynamic rules keep their original order.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..enums import FORMAT, METHOD
from .resolve import gguf_bits_alias

if TYPE_CHECKING:
    from .model import QuantizeConfig

_AWQ_FAMILIES = (FORMAT.GEMM, FORMAT.GEMV, FORMAT.GEMV_FAST, FORMAT.LLM_AWQ, FORMAT.PAROQUANT)


def _empty(value: object) -> bool:
    return value is None or (isinstance(value, (dict, list, tuple)) and len(value) == 0)


def config_to_dict(cfg: QuantizeConfig) -> dict[str, Any]:
    """The JSON-ready dict of ``cfg`` (a new dict each call; key order is the write order)."""
    from .model import CONFIG_VERSION, META_VERSION_KEY

    family = cfg.family
    method = cfg.method.value if isinstance(cfg.method, METHOD) else str(cfg.method)
    fmt = str(cfg.format)
    out: dict[str, Any] = {}
    if family is FORMAT.GGUF:
        out["bits"] = gguf_bits_alias(cfg.width, fmt)
    else:
        out["bits"] = cfg.bits
    rules = cfg.rules
    out["dynamic"] = rules.to_mapping() if rules is not None else None
    if family is not FORMAT.GGUF:
        out["group_size"] = cfg.group_size
        out["desc_act"] = cfg.desc_act
    if family not in _AWQ_FAMILIES:
        out["sym"] = cfg.sym
    out["lm_head"] = cfg.lm_head
    out["method"] = method
    out["quant_method"] = method
    out["format"] = fmt
    out["checkpoint_format"] = fmt
    if family is not FORMAT.GGUF:
        out["pack_dtype"] = cfg.pack_dtype
    if family in _AWQ_FAMILIES:
        out["zero_point"] = not cfg.sym
        out["version"] = fmt
    if family is FORMAT.QQQ:
        out["wbits"] = cfg.bits
    for key, value in cfg.settings.items():
        out.setdefault(key, value)
    meta = dict(cfg.meta)
    meta[META_VERSION_KEY] = CONFIG_VERSION
    out["meta"] = meta
    for key, value in cfg.unknown.items():
        out.setdefault(key, value)
    return {k: v for k, v in out.items() if not _empty(v)}


def config_to_json(cfg: QuantizeConfig, *, indent: int = 2) -> str:
    """``cfg`` as JSON text (keys in write order, never sorted: dynamic rule order matters)."""
    return json.dumps(config_to_dict(cfg), indent=indent, sort_keys=False) + "\n"
