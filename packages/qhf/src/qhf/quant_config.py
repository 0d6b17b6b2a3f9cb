"""The user's quantization settings as qhf needs them, and their serialized checkpoint form.

Accepts a plain dict in the reference's vocabulary (``bits``, ``group_size``, ``sym``, ``desc_act``,
``method``, ``format``, ``damp_percent`` ...; ``quant_method``/``checkpoint_format``/``zero_point`` aliases)
or any object with ``to_dict()``. :meth:`QuantSettings.to_checkpoint_dict` writes the dict stored in both
``quantize_config.json`` and ``config.json["quantization_config"]``: ``method`` and ``quant_method``,
``format`` and ``checkpoint_format``, ``pack_dtype`` as a string, AWQ's ``zero_point``/``version``, and a
``meta`` block naming the quantizer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import __version__
from .errors import QHFError

METHOD_FORMATS = {
    "gptq": ("gptq", "gptq_v2", "gptq_p"),
    "awq": ("gemm", "gemv", "gemv_fast", "llm-awq"),
    "rtn": ("gptq", "gptq_v2", "gptq_p", "gemm", "gemv", "gemv_fast", "llm-awq"),
}
DEFAULT_FORMAT = {"gptq": "gptq", "awq": "gemm", "rtn": "gptq"}
QUANTIZER = f"lowbit-qhf:{__version__}"


class QuantConfigError(QHFError, ValueError):
    """The quantization settings are malformed or contradictory (names the field)."""


@dataclass(frozen=True)
class QuantSettings:
    """Normalized settings. ``method``: gptq | awq | rtn; ``format``: the checkpoint layout key.

    ``act_group_aware`` left as ``None`` resolves as the reference's default does: on for GPTQ with groups
    (``group_size > 0``) and without ``desc_act``, off otherwise (the reference refuses it per channel; the
    ordering changes nothing there, so lowbit turns it off instead). Set explicitly, it must not be combined
    with ``desc_act`` and only GPTQ accepts it.
    """

    method: str = "gptq"
    bits: int = 4
    group_size: int = 128
    sym: bool = True
    desc_act: bool = False
    format: str = "gptq"
    damp_percent: float = 0.05
    damp_auto_increment: float = 0.01
    static_groups: bool = False
    act_group_aware: bool | None = None
    mse: float = 0.0
    true_sequential: bool = True
    pack_dtype: str = "int32"
    lm_head: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    #: The run's calibration record (set by ``QuantModel.quantize`` for the default mixture), written to
    #: ``meta.calibration``; not a setting: never parsed from a user's config.
    calibration: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        gar = self.act_group_aware
        if gar is None:
            gar = self.method == "gptq" and self.group_size != -1 and not self.desc_act
        elif gar and self.desc_act:
            raise QuantConfigError("act_group_aware: requires desc_act=False (the two orderings are alternatives)")
        elif gar and self.method == "awq":
            raise QuantConfigError("act_group_aware: AWQ keeps the natural column order; only GPTQ reorders")
        object.__setattr__(self, "act_group_aware", bool(gar))

    @property
    def checkpoint_method(self) -> str:
        """The method written to the checkpoint: RTN exports as the family its format belongs to."""
        if self.method != "rtn":
            return self.method
        return "awq" if self.format in METHOD_FORMATS["awq"] else "gptq"

    def to_checkpoint_dict(self) -> dict[str, Any]:
        method = self.checkpoint_method
        out: dict[str, Any] = {
            "bits": self.bits,
            "group_size": self.group_size,
            "desc_act": self.desc_act,
            "lm_head": self.lm_head,
            "method": method,
            "quant_method": method,
            "format": self.format,
            "checkpoint_format": self.format,
            "pack_dtype": self.pack_dtype,
            "meta": {
                "quantizer": [QUANTIZER],
                "algorithm": self.method,
                "damp_percent": self.damp_percent,
                "damp_auto_increment": self.damp_auto_increment,
                "static_groups": self.static_groups,
                "true_sequential": self.true_sequential,
                "mse": self.mse,
                "act_group_aware": self.act_group_aware,
            },
        }
        if self.calibration:
            out["meta"]["calibration"] = dict(self.calibration)
        if method == "awq":
            out["zero_point"] = not self.sym
            out["version"] = self.format
        else:
            out["sym"] = self.sym
        return out


_ALIASES = {
    "w_bit": "bits",
    "wbits": "bits",
    "q_group_size": "group_size",
    "quant_method": "method",
    "version": "format",
}


def _as_dict(config: Any) -> dict[str, Any]:
    if config is None:
        return {}
    if isinstance(config, QuantSettings):
        return {k: getattr(config, k) for k in QuantSettings.__dataclass_fields__ if k not in ("extra", "calibration")}
    if isinstance(config, dict):
        return dict(config)
    if hasattr(config, "to_dict"):
        return dict(config.to_dict())
    raise QuantConfigError(f"quant_config: expected a dict or an object with to_dict(), found {type(config).__name__}")


def parse_settings(config: Any) -> QuantSettings:
    """Normalize ``config`` (see the module docstring); unknown keys are kept in ``extra``."""
    raw = {str(k).lower(): v for k, v in _as_dict(config).items()}
    for alias, name in _ALIASES.items():
        if alias in raw and name not in raw:
            raw[name] = raw.pop(alias)
        else:
            raw.pop(alias, None)
    if "checkpoint_format" in raw:
        value = raw.pop("checkpoint_format")
        raw.setdefault("format", value)
    if "zero_point" in raw:
        raw.setdefault("sym", not bool(raw.pop("zero_point")))
    meta = raw.pop("meta", None) or {}
    for key in ("damp_percent", "damp_auto_increment", "static_groups", "true_sequential", "mse", "act_group_aware"):
        if key in meta and key not in raw:
            raw[key] = meta[key]
    method = str(raw.pop("method", "gptq")).lower()
    if isinstance(meta, dict) and meta.get("algorithm") in METHOD_FORMATS:
        method = str(meta["algorithm"])
    if method not in METHOD_FORMATS:
        raise QuantConfigError(f"method: expected one of {', '.join(METHOD_FORMATS)}, found {method!r}")
    fmt = str(raw.pop("format", DEFAULT_FORMAT[method])).lower()
    if fmt not in METHOD_FORMATS[method]:
        raise QuantConfigError(
            f"format: method {method!r} writes one of {', '.join(METHOD_FORMATS[method])}, found {fmt!r}"
        )
    fields = QuantSettings.__dataclass_fields__
    known = {k: raw.pop(k) for k in list(raw) if k in fields and k not in ("extra", "calibration")}
    try:
        settings = QuantSettings(method=method, format=fmt, extra=raw, **known)
    except TypeError as exc:
        raise QuantConfigError(f"quant_config: {exc}") from exc
    bits, group_size = settings.bits, settings.group_size
    if isinstance(bits, bool) or not isinstance(bits, int) or not 2 <= bits <= 8:
        raise QuantConfigError(f"bits: expected an integer in 2..8, found {bits!r}")
    if not isinstance(group_size, int) or (group_size != -1 and group_size <= 0):
        raise QuantConfigError(f"group_size: expected -1 or a positive integer, found {group_size!r}")
    return settings
