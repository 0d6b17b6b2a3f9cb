"""Reading quantization configs from JSON objects, files and checkpoint directories.

A directory is probed in the reference's priority order -- ``quantize_config.json``, then
``quant_config.json``, then ``config.json`` (its nested ``quantization_config`` object) -- and the
**first file that exists** wins, even when a later one disagrees (the reader reports which file).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..file_access import open_regular
from .aliases import FoldedConfig, fold_aliases
from .model import QuantizeConfig
from .serialize import config_to_json

QUANTIZE_CONFIG_FILENAME = "quantize_config.json"
CONFIG_FILENAMES: tuple[str, ...] = (QUANTIZE_CONFIG_FILENAME, "quant_config.json", "config.json")
NESTED_KEY = "quantization_config"


def parse_config(raw: object, *, source: str = "<config>") -> QuantizeConfig:
    """A :class:`QuantizeConfig` from a parsed JSON object; errors name ``source`` and the field."""
    return config_from_folded(fold_aliases(raw, source), source=source)


def config_from_folded(folded: FoldedConfig, *, source: str = "<config>", **fields: Any) -> QuantizeConfig:
    """The :class:`QuantizeConfig` of an alias-folded config (:func:`~qformats.config.aliases.fold_aliases`).

    ``fields`` replace folded canonical fields before the rules run (a caller that reads the folded values
    first, e.g. to refuse a method/format pair instead of letting the resolver fix it, passes its choice of
    ``method`` / ``format``); a ``None`` value leaves the field to its default.
    """
    values = {**folded.fields, **fields}
    kwargs: dict[str, Any] = {
        "meta": values.get("meta") or {},
        "settings": folded.settings,
        "unknown": folded.unknown,
        "notes": tuple(folded.notes),
    }
    if "sym" not in values:
        kwargs["notes"] = (*kwargs["notes"], "sym missing: defaulted to true")
    for key in ("bits", "group_size", "sym", "desc_act", "method", "format", "pack_dtype", "lm_head", "dynamic"):
        if key in values and values[key] is not None:
            kwargs[key] = values[key]
    try:
        return QuantizeConfig(**kwargs)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def _load_json(path: Path) -> Any:
    try:
        with open_regular(path) as fh:  # a FIFO or device is refused, never blocked on
            text = fh.read().decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start}); expected UTF-8 JSON") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise ConfigError(f"{path}: JSON nested too deeply to parse; expected a config object") from None


def read_config_object(path: str | os.PathLike[str]) -> tuple[str, Any]:
    """``(source, raw JSON value)`` of one config file, unparsed; ``config.json`` gives its nested object.

    ``source`` names the file (and ``:quantization_config`` for a ``config.json``) for error messages.
    """
    path = Path(path)
    data = _load_json(path)
    if path.name == "config.json":
        if not isinstance(data, Mapping) or NESTED_KEY not in data:
            raise ConfigError(f"{path}: expected a {NESTED_KEY!r} object, found none")
        return f"{path}:{NESTED_KEY}", data[NESTED_KEY]
    return str(path), data


def read_config_file(path: str | os.PathLike[str]) -> QuantizeConfig:
    """Parse one file; ``config.json`` files are read through their ``quantization_config`` object."""
    source, raw = read_config_object(path)
    return parse_config(raw, source=source)


def find_config_file(directory: str | os.PathLike[str]) -> Path:
    """The file a reader uses in ``directory`` (first existing name of :data:`CONFIG_FILENAMES`).

    A name that exists but is not a regular file (a FIFO, a dangling link) is still the one chosen, so the
    read refuses it by name rather than silently falling back to the next file.
    """
    directory = Path(directory)
    for name in CONFIG_FILENAMES:
        candidate = directory / name
        if os.path.lexists(candidate):
            return candidate
    raise ConfigError(f"{directory}: no quantization config found (looked for {', '.join(CONFIG_FILENAMES)})")


def read_config(directory: str | os.PathLike[str]) -> QuantizeConfig:
    """The quantization config of a checkpoint directory (reference file priority)."""
    return read_config_file(find_config_file(directory))


def write_quantize_config(directory: str | os.PathLike[str], cfg: QuantizeConfig) -> Path:
    """Write ``quantize_config.json`` into an existing ``directory``; returns its path."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ConfigError(f"{directory}: not a directory")
    path = directory / QUANTIZE_CONFIG_FILENAME
    path.write_text(config_to_json(cfg), encoding="utf-8")
    return path


def embed_in_model_config(model_config: Mapping[str, Any], cfg: QuantizeConfig) -> dict[str, Any]:
    """A copy of a ``config.json`` object with ``quantization_config`` set to ``cfg`` (rule order kept)."""
    out = dict(model_config)
    out[NESTED_KEY] = cfg.to_dict()
    return out
