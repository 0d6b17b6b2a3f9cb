"""Finding a checkpoint's quantization config and reading the fields the checkpoint layer needs.

File priority (the reference's ``from_pretrained``): the first that exists of ``quantize_config.json``,
``quant_config.json``, ``config.json`` (whose nested ``quantization_config`` is used).

:func:`read_quant_fields` reads bits, group size, symmetry, method, layout key and pack dtype through
the reference's aliases (``w_bit``/``wbits``, ``q_group_size``, ``version``/``checkpoint_format``,
``quant_method``, ``zero_point`` -> ``sym = not zero_point``, ``backend: "llm-awq"``). It is the single
switch point to the package's full config parser once that exists.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CheckpointFormatError, ConfigError

CONFIG_PRIORITY: tuple[str, ...] = ("quantize_config.json", "quant_config.json", "config.json")

AWQ_FORMATS = {"gemm", "gemv", "gemv_fast", "llm-awq", "marlin", "bitblas"}
GPTQ_FORMATS = {"gptq", "gptq_v2", "gptq_p", "marlin", "bitblas"}


@dataclass(frozen=True)
class QuantFields:
    """The config fields a checkpoint reader needs; ``layout`` is the registry key for the modules."""

    bits: int
    group_size: int
    sym: bool
    method: str
    format: str
    layout: str
    pack_dtype: str
    dynamic: dict[str, dict[str, object]] = field(default_factory=dict)
    source_file: str = ""


def find_quant_config(directory: str | Path) -> tuple[Path, dict[str, object]]:
    """``(file, quantization dict)`` from the first config file present, by the reference's priority."""
    root = Path(directory)
    for name in CONFIG_PRIORITY:
        path = root / name
        if not path.is_file():
            continue
        data = _load_json(path)
        if name == "config.json":
            nested = data.get("quantization_config")
            if not isinstance(nested, dict):
                raise CheckpointFormatError(
                    f"{path}: no 'quantization_config' object (this is not a quantized checkpoint)"
                )
            return path, nested
        return path, data
    raise CheckpointFormatError(f"{root}: no quantization config found; looked for {', '.join(CONFIG_PRIORITY)}")


def _load_json(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointFormatError(f"{path}: unreadable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CheckpointFormatError(f"{path}: expected a JSON object, found {type(data).__name__}")
    return data


def _int_field(cfg: dict[str, object], names: tuple[str, ...], default: int | None) -> int:
    for name in names:
        if name in cfg and cfg[name] is not None:
            value = cfg[name]
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{name}: expected an integer, found {value!r}")
            return value
    if default is None:
        raise ConfigError(f"{names[0]}: required field missing")
    return default


def read_quant_fields(raw: dict[str, object], source_file: str = "") -> QuantFields:
    """Normalize a quantization config dict into :class:`QuantFields` (raises ConfigError naming the field)."""
    cfg = {str(k).lower(): v for k, v in raw.items()}
    if cfg.get("is_marlin_format"):
        raise ConfigError("is_marlin_format: hard-deprecated; use format='marlin'")
    bits = _int_field(cfg, ("bits", "w_bit", "wbits"), None)
    group_size = _int_field(cfg, ("group_size", "q_group_size"), 128)
    if group_size != -1 and group_size <= 0:
        raise ConfigError(f"group_size: expected -1 or a positive integer, found {group_size}")
    method = str(cfg.get("method") or cfg.get("quant_method") or "gptq").lower()
    fmt_value = cfg.get("format") or cfg.get("version") or cfg.get("checkpoint_format")
    fmt = str(fmt_value).lower() if fmt_value is not None else None
    if method in ("marlin", "bitblas"):
        fmt, method = method, ("awq" if fmt in AWQ_FORMATS - {"marlin", "bitblas"} else "gptq")
    backend = str(cfg.get("backend") or "").lower()
    if backend == "llm-awq":
        method, fmt = "awq", "llm-awq"
    if fmt is None:
        fmt = "gemm" if method == "awq" else "gptq"
    if "sym" in cfg:
        sym = bool(cfg["sym"])
    elif "zero_point" in cfg:
        sym = not bool(cfg["zero_point"])
    else:
        sym = True
    layout = fmt
    if method == "awq" and fmt == "marlin":
        layout = "awq_marlin"
    elif method == "awq" and fmt not in AWQ_FORMATS:
        raise ConfigError(f"format: method awq stores {sorted(AWQ_FORMATS)}, found {fmt!r}")
    default_pack = "int16" if layout in ("gemv_fast", "llm-awq") else "int32"
    pack_dtype = str(cfg.get("pack_dtype") or default_pack).replace("torch.", "")
    dynamic = cfg.get("dynamic") or {}
    if not isinstance(dynamic, dict):
        raise ConfigError(f"dynamic: expected an object of pattern -> overrides, found {type(dynamic).__name__}")
    return QuantFields(bits, group_size, sym, method, fmt, layout, pack_dtype, dict(dynamic), source_file)


def module_overrides(fields: QuantFields, module: str) -> dict[str, object] | None:
    """The ``dynamic`` override for ``module``: ``None`` when a ``-:`` rule excludes it, else a dict.

    Negative rules are tried first, then positive ones (``+:`` or no prefix), each in file order; the
    pattern is a regex matched at the start of the module's dotted name; first match wins.
    """
    negatives = [(p[2:], v) for p, v in fields.dynamic.items() if p.startswith("-:")]
    positives = [(p[2:] if p.startswith("+:") else p, v) for p, v in fields.dynamic.items() if not p.startswith("-:")]
    for pattern, _ in negatives:
        if re.match(pattern, module):
            return None
    for pattern, override in positives:
        if re.match(pattern, module):
            return dict(override) if isinstance(override, dict) else {}
    return {}
