"""The user's quantization settings as qhf needs them, and their serialized checkpoint form.

Accepts a plain dict in the reference's vocabulary (``bits``, ``group_size``, ``sym``, ``desc_act``,
``method``, ``format``, ``damp_percent`` ...; ``quant_method``/``checkpoint_format``/``zero_point`` aliases)
or any object with ``to_dict()``. It is parsed once, by qformats (:func:`read_quantize_config`: aliases that
disagree are refused, unknown keys kept in ``QuantizeConfig.unknown``); :class:`QuantSettings` is qhf's typed
view of that :class:`qformats.config.QuantizeConfig`, which it carries as ``config``.
:meth:`QuantSettings.to_checkpoint_dict` writes the dict stored in both
``quantize_config.json`` and ``config.json["quantization_config"]``: ``method`` and ``quant_method``,
``format`` and ``checkpoint_format``, ``pack_dtype`` as a string, AWQ's ``zero_point``/``version``, and a
``meta`` block naming the quantizer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from qformats.config import QuantizeConfig
from qformats.config.quantizer_formats import DEFAULT_FORMATS, QUANTIZER_FORMATS, WEIGHT_ONLY_METHODS

from . import __version__
from .errors import QHFError

FP8_SCALE_METHODS = ("tensor", "row", "block")
QUANTIZER = f"lowbit-qhf:{__version__}"


class QuantConfigError(QHFError, ValueError):
    """The quantization settings are malformed or contradictory (names the field)."""


@dataclass(frozen=True)
class QuantSettings:
    """Normalized settings. ``method``: gptq | awq | rtn | qqq (or a weight-only method); ``format``: the
    checkpoint layout key.

    ``act_group_aware`` left as ``None`` resolves as the reference's default does: on for GPTQ with groups
    (``group_size > 0``) and without ``desc_act``, off otherwise (the reference refuses it per channel; the
    ordering changes nothing there, so lowbit turns it off instead). It also resolves off with a ``gptaq`` or
    ``foem`` section: the reference's GPTAQ/FOEM solves visit columns in natural order whatever the setting.
    Set explicitly, it must not be combined with ``desc_act`` and only GPTQ accepts it.
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
    #: FP8 only: ``row`` | ``tensor`` | ``block`` (``block`` needs ``weight_block_size`` ``(rows, cols)``).
    weight_scale_method: str = "row"
    weight_block_size: tuple[int, int] | None = None
    #: bitsandbytes 4-bit only: values per absmax block and nested (8-bit) absmax statistics.
    block_size: int = 64
    compress_statistics: bool = True
    #: GPTQ only: GPTAQ's ``{"alpha"}`` or FOEM's ``{"alpha", "beta"}`` (the reference's ``gptaq`` / ``foem``
    #: sections, written under ``meta``); None: plain GPTQ. At most one of them.
    gptaq: dict[str, Any] | None = None
    foem: dict[str, Any] | None = None
    #: EoRA adapters after the solve (GPTQ family only): the reference's ``adapter`` field,
    #: ``{"name": "lora", "path": "eora", "rank": R}`` (``path``: the adapter directory inside the checkpoint).
    adapter: dict[str, Any] | None = None
    #: GGUF only: the reference's per-module overrides (``{"+:^name$": {"bits": 6, "format": "q_k"}}``); a
    #: ``q_k_m`` / ``q_k_s`` run fills it with the mixture's per-module types (:mod:`qhf.weight_only`).
    dynamic: dict[str, dict[str, Any]] | None = None
    #: The parsed qformats config these settings were derived from (:func:`read_quantize_config`): its
    #: ``settings`` / ``unknown`` hold the fields this view does not name (ParoQuant's ``krot`` / ``opt_*``).
    #: None for settings built in code.
    config: QuantizeConfig | None = field(default=None, compare=False, repr=False)
    #: The run's calibration record (set by ``QuantModel.quantize`` for the default mixture), written to
    #: ``meta.calibration``; not a setting: never parsed from a user's config.
    calibration: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "gptaq", _section("gptaq", self.gptaq, {"alpha": 0.25}, self.method))
        object.__setattr__(self, "foem", _section("foem", self.foem, {"alpha": 0.0, "beta": 0.2}, self.method))
        if self.gptaq is not None and self.foem is not None:
            raise QuantConfigError(
                "gptaq, foem: choose one (FOEM's alpha is GPTAQ's term: foem {alpha: 0.25, beta: 0.2} is both)"
            )
        object.__setattr__(self, "adapter", _adapter(self.adapter, self.method))
        gar = self.act_group_aware
        if gar is None:  # the reference's GPTAQ/FOEM solves ignore act_group_aware: natural order there
            gar = self.method == "gptq" and self.group_size != -1 and not self.desc_act and self.asymmetric is None
        elif gar and self.desc_act:
            raise QuantConfigError("act_group_aware: requires desc_act=False (the two orderings are alternatives)")
        elif gar and self.method == "awq":
            raise QuantConfigError("act_group_aware: AWQ keeps the natural column order; only GPTQ reorders")
        object.__setattr__(self, "act_group_aware", bool(gar))
        if self.method == "qqq":
            from .qqq_settings import qqq_problem

            problem = qqq_problem(self)
            if problem is not None:
                raise QuantConfigError(problem)

    @property
    def asymmetric(self) -> tuple[str, dict[str, float]] | None:
        """``("gptaq", {"alpha"})`` or ``("foem", {"alpha", "beta"})`` when one is set, else None."""
        if self.gptaq is not None:
            return "gptaq", dict(self.gptaq)
        if self.foem is not None:
            return "foem", dict(self.foem)
        return None

    @property
    def weight_only(self) -> bool:
        """FP8 / bitsandbytes / GGUF: quantized from the weight alone (:mod:`qhf.weight_only`)."""
        return self.method in WEIGHT_ONLY_METHODS

    @property
    def needs_calibration(self) -> bool:
        return self.method != "rtn" and not self.weight_only

    @property
    def checkpoint_method(self) -> str:
        """The method written to the checkpoint: RTN exports as the family its format belongs to."""
        if self.method != "rtn":
            return self.method
        return "awq" if self.format in QUANTIZER_FORMATS["awq"] else "gptq"

    def _weight_only_dict(self) -> dict[str, Any]:
        """The reference's serialized FP8 / bitsandbytes / GGUF config (GGUF drops group_size, desc_act,
        pack_dtype; FP8 and bitsandbytes write them as -1, False, int32)."""
        out: dict[str, Any] = {"bits": self.bits}
        if self.method != "gguf":
            out.update(group_size=-1, desc_act=False)
        out.update(
            lm_head=self.lm_head, method=self.method, quant_method=self.method,
            format=self.format, checkpoint_format=self.format,
        )  # fmt: skip
        if self.method != "gguf":
            out["pack_dtype"] = self.pack_dtype
        out["meta"] = {"quantizer": [QUANTIZER], "algorithm": self.method}
        if self.method == "fp8":
            out["weight_scale_method"] = self.weight_scale_method
            if self.weight_block_size is not None:
                out["weight_block_size"] = list(self.weight_block_size)
            out["weight_scale_semantics"] = "inverse"
        elif self.method == "bitsandbytes":
            out.update(block_size=self.block_size, compress_statistics=self.compress_statistics)
        if self.dynamic:
            out["dynamic"] = {key: dict(value) for key, value in self.dynamic.items()}
        return out

    def to_checkpoint_dict(self) -> dict[str, Any]:
        if self.weight_only:
            return self._weight_only_dict()
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
        if self.asymmetric is not None:
            name, values = self.asymmetric
            out["meta"][name] = {**values, "device": "auto"}
        if self.adapter is not None:
            out["adapter"] = dict(self.adapter)
        if self.calibration:
            out["meta"]["calibration"] = dict(self.calibration)
        if method == "paroquant":  # the reference's fields: zero_point, krot; opt_* under meta
            from .paroquant_settings import checkpoint_fields

            top, meta = checkpoint_fields(self)
            out.update(top)
            out["meta"].update(meta)
        elif method == "awq":
            out["zero_point"] = not self.sym
            out["version"] = self.format
        else:
            out["sym"] = self.sym
        if method == "qqq":
            out["wbits"] = self.bits  # vLLM's QQQ loader reads the weight width from wbits (as the reference writes)
        return out


SOURCE = "quant_config"
#: Settings of the calibrated methods (GPTQ family, AWQ, RTN, QQQ, ParoQuant) read from ``QuantizeConfig.settings``.
CALIBRATED_SETTINGS = (
    "damp_percent", "damp_auto_increment", "static_groups", "act_group_aware", "mse", "true_sequential",
    "gptaq", "foem", "adapter",
)  # fmt: skip
#: Settings of the weight-only methods read from ``QuantizeConfig.settings``.
WEIGHT_ONLY_SETTINGS = ("weight_scale_method", "weight_block_size", "block_size", "compress_statistics")


def _as_dict(config: Any) -> dict[str, Any]:
    if config is None:
        return {}
    if isinstance(config, QuantSettings):
        skip = ("config", "calibration")
        fields = {k: getattr(config, k) for k in QuantSettings.__dataclass_fields__ if k not in skip}
        if config.config is not None:  # fields the typed view does not name (ParoQuant's opt_* ...)
            fields = {**config.config.settings, **config.config.unknown, **fields}
        return {k: v for k, v in fields.items() if v is not None}
    if isinstance(config, dict):
        return dict(config)
    if hasattr(config, "to_dict"):
        return dict(config.to_dict())
    raise QuantConfigError(f"quant_config: expected a dict or an object with to_dict(), found {type(config).__name__}")


def read_quantize_config(config: Any) -> tuple[str, QuantizeConfig]:
    """``(method, QuantizeConfig)`` of a user's config: qformats' parsing with qhf's method table on top.

    qformats folds the aliases (refusing aliases of one field that disagree, e.g. ``bits`` 4 with ``wbits`` 8),
    lifts the reference's settings from ``meta`` and keeps unknown keys (``QuantizeConfig.unknown``). qhf then
    names the run's ``method`` (``rtn`` included; a checkpoint's ``meta.algorithm`` wins) and refuses a
    method/format pair outside :data:`~qformats.config.QUANTIZER_FORMATS` and weight-only widths its packers
    do not store, before qformats' rules resolve the rest (:class:`qformats.config.QuantizeConfig`).
    """
    from qformats.config import config_from_folded, fold_aliases
    from qformats.errors import ConfigError

    try:
        folded = fold_aliases(_as_dict(config), SOURCE)
    except ConfigError as exc:
        raise QuantConfigError(str(exc)) from None
    fields = folded.fields
    method = str(fields.get("method") or "gptq")
    algorithm = fields["meta"].get("algorithm")
    if algorithm in QUANTIZER_FORMATS:
        method = str(algorithm)
    if method not in QUANTIZER_FORMATS:
        raise QuantConfigError(f"method: expected one of {', '.join(QUANTIZER_FORMATS)}, found {method!r}")
    fmt = fields.get("format")
    bits = fields.get("bits")
    if method in WEIGHT_ONLY_METHODS:
        if folded.settings.get("adapter") is not None:
            raise QuantConfigError(f"adapter: EoRA follows a GPTQ-family solve; method {method!r} cannot use it")
        bits, fmt = _weight_only_bits_format(method, bits, fmt)
        resolved_method = method
    else:
        fmt = fmt or DEFAULT_FORMATS[method]
        if fmt not in QUANTIZER_FORMATS[method]:
            raise QuantConfigError(
                f"format: method {method!r} writes one of {', '.join(QUANTIZER_FORMATS[method])}, found {fmt!r}"
            )
        resolved_method = ("awq" if fmt in QUANTIZER_FORMATS["awq"] else "gptq") if method == "rtn" else method
    try:
        cfg = config_from_folded(folded, source=SOURCE, method=resolved_method, format=fmt, bits=bits)
    except ConfigError as exc:
        raise QuantConfigError(str(exc)) from None
    return method, cfg


def parse_settings(config: Any) -> QuantSettings:
    """Normalize ``config`` (see the module docstring) through :func:`read_quantize_config`: a dict, an object
    with ``to_dict()``, or a ``QuantSettings`` (re-checked)."""
    method, cfg = read_quantize_config(config)
    return settings_from_config(method, cfg)


def settings_from_config(method: str, cfg: QuantizeConfig) -> QuantSettings:
    """qhf's typed view of a parsed ``QuantizeConfig`` quantized with ``method`` (``rtn`` or a
    :data:`~qformats.config.QUANTIZER_FORMATS` key); ``cfg`` stays attached as ``QuantSettings.config``."""
    if method in WEIGHT_ONLY_METHODS:
        return _weight_only_settings(method, cfg)
    known = {k: cfg.settings[k] for k in CALIBRATED_SETTINGS if k in cfg.settings}
    if method == "qqq":  # the reference's QQQ damping defaults
        from .qqq_settings import DEFAULTS

        known = {**DEFAULTS, **known}
    bits = cfg.bits
    if isinstance(bits, bool) or not isinstance(bits, int) or not 2 <= bits <= 8:
        raise QuantConfigError(f"bits: expected an integer in 2..8, found {bits!r}")
    try:
        settings = QuantSettings(
            method=method, format=str(cfg.format), bits=bits, group_size=cfg.group_size, sym=cfg.sym,
            desc_act=bool(cfg.desc_act), pack_dtype=cfg.pack_dtype, lm_head=cfg.lm_head, config=cfg, **known,
        )  # fmt: skip
    except TypeError as exc:
        raise QuantConfigError(f"quant_config: {exc}") from exc
    if method == "paroquant":
        from .paroquant_settings import refuse_unsupported

        refuse_unsupported(settings)
    return settings


def _section(name: str, value: Any, defaults: dict[str, float], method: str) -> dict[str, float] | None:
    """A ``gptaq`` / ``foem`` section: None, or a dict of the ``defaults`` keys (plus an ignored ``device``,
    the reference's placement hint) with numbers in [0, 1]; only GPTQ takes one."""
    if value is None or value is False:
        return None
    if value is True:
        value = {}
    if not isinstance(value, dict):
        raise QuantConfigError(f"{name}: expected a dict like {defaults} or null, found {value!r}")
    unknown = sorted(set(value) - set(defaults) - {"device"})
    if unknown:
        raise QuantConfigError(f"{name}: unknown keys {unknown}; expected {sorted(defaults)} (and device)")
    if method != "gptq":
        raise QuantConfigError(f"{name}: a GPTQ variant; method {method!r} cannot use it")
    out = {}
    for key, default in defaults.items():
        number = value.get(key, default)
        if isinstance(number, bool) or not isinstance(number, (int, float)) or not 0.0 <= float(number) <= 1.0:
            raise QuantConfigError(f"{name}.{key}: expected a number in [0, 1], found {number!r}")
        out[key] = float(number)
    return out


def _adapter(value: Any, method: str) -> dict[str, Any] | None:
    """The ``adapter`` field: None, or ``{"name": "lora", "path": <relative dir>, "rank": R > 0}`` (defaults:
    name ``lora``, path ``eora``); only the GPTQ family (GPTQ, GPTAQ, FOEM) computes EoRA adapters."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise QuantConfigError(f"adapter: expected a dict like {{'rank': 32}} or null, found {value!r}")
    unknown = sorted(set(value) - {"name", "path", "rank"})
    if unknown:
        raise QuantConfigError(f"adapter: unknown keys {unknown}; expected name, path, rank")
    name = value.get("name", "lora")
    if name != "lora":
        raise QuantConfigError(f"adapter.name: lowbit writes 'lora' (EoRA) adapters, found {name!r}")
    rank = value.get("rank")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise QuantConfigError(f"adapter.rank: expected a positive integer, found {rank!r}")
    path = value.get("path") or "eora"
    parts = str(path).replace("\\", "/").split("/")
    if not isinstance(path, str) or path.startswith("/") or ".." in parts or ":" in path:
        raise QuantConfigError(f"adapter.path: expected a relative directory inside the checkpoint, found {path!r}")
    if method != "gptq":
        raise QuantConfigError(f"adapter: EoRA follows a GPTQ-family solve; method {method!r} cannot use it")
    return {"name": "lora", "path": path, "rank": rank}


def _weight_only_bits_format(method: str, bits: Any, fmt: str | None) -> tuple[int, str]:
    """``(bits, public format)`` of an FP8 / bitsandbytes / GGUF config with the reference's defaults (FP8
    8-bit ``float8_e4m3fn``; bitsandbytes 4-bit ``fp4``, 8-bit ``int8``; GGUF ``bits`` + public format, a
    ``q4_k_m`` style alias too); refuses a width or format lowbit's packers do not store, naming the field."""
    from .gguf_settings import gguf_bits_format

    if bits is None:
        bits = 8 if method == "fp8" else 4
    if isinstance(bits, bool) or not isinstance(bits, (int, str)):
        raise QuantConfigError(f"bits: expected an integer, found {bits!r}")
    if method == "gguf":
        bits, fmt = gguf_bits_format(bits, fmt)
    elif method == "fp8":
        if bits != 8:
            raise QuantConfigError(f"bits: FP8 stores 8-bit weights, found {bits!r}")
        fmt = fmt or DEFAULT_FORMATS["fp8"]
    else:
        if bits not in (4, 8):
            raise QuantConfigError(f"bits: bitsandbytes stores 4-bit (nf4/fp4) or 8-bit (int8), found {bits!r}")
        fmt = fmt or ("int8" if bits == 8 else DEFAULT_FORMATS["bitsandbytes"])
        if (fmt == "int8") != (bits == 8):
            raise QuantConfigError(f"format: bitsandbytes {fmt!r} does not store {bits}-bit weights")
    if fmt not in QUANTIZER_FORMATS[method]:
        choices = ", ".join(QUANTIZER_FORMATS[method])
        raise QuantConfigError(f"format: method {method!r} writes one of {choices}, found {fmt!r}")
    return int(bits), fmt


def _weight_only_settings(method: str, cfg: QuantizeConfig) -> QuantSettings:
    """FP8 / bitsandbytes / GGUF settings with the reference's forced fields (group_size -1, sym, no act-order;
    the calibration settings mean nothing without calibration and are not read) and its FP8 / bitsandbytes
    fields (``weight_scale_method`` row, ``weight_block_size``, ``block_size`` 64, nested statistics)."""
    from .gguf_settings import gguf_dynamic

    known: dict[str, Any] = {k: cfg.settings[k] for k in WEIGHT_ONLY_SETTINGS if k in cfg.settings}
    if method == "gguf" and cfg.rules is not None:
        known["dynamic"] = gguf_dynamic(cfg.rules.to_mapping())
    semantics = cfg.settings.get("weight_scale_semantics", "inverse")
    if semantics is not None and semantics != "inverse":
        raise QuantConfigError(
            f"weight_scale_semantics: lowbit writes FP8 scales as 'inverse' (the reference's), found {semantics!r}"
        )
    block = known.get("weight_block_size")
    if block is not None:
        if (
            not isinstance(block, (list, tuple))
            or len(block) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in block)
        ):
            raise QuantConfigError(f"weight_block_size: expected [rows, cols] of positive integers, found {block!r}")
        known["weight_block_size"] = (int(block[0]), int(block[1]))
        known.setdefault("weight_scale_method", "block")
    scale_method = known.get("weight_scale_method", "row")
    if scale_method not in FP8_SCALE_METHODS:
        raise QuantConfigError(f"weight_scale_method: expected one of {FP8_SCALE_METHODS}, found {scale_method!r}")
    if (scale_method == "block") != (known.get("weight_block_size") is not None):
        raise QuantConfigError(
            f"weight_scale_method {scale_method!r} with weight_block_size {known.get('weight_block_size')!r}: "
            "'block' needs weight_block_size [rows, cols], the other methods take none"
        )
    size = known.get("block_size", 64)
    if isinstance(size, bool) or not isinstance(size, int) or size < 32 or size > 4096 or size & (size - 1):
        raise QuantConfigError(f"block_size: expected a power of two in 32..4096, found {size!r}")
    return QuantSettings(
        method=method, bits=cfg.width, group_size=-1, sym=True, desc_act=False, format=str(cfg.format),
        act_group_aware=False, lm_head=cfg.lm_head, config=cfg, **known,
    )  # fmt: skip
