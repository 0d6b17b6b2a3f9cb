"""``QuantizeConfig``: the typed, versioned quantization config every package reads and writes.

Construct it directly (canonical keyword names only) or parse a JSON object with
:func:`qformats.config.parse_config`. Either way ``__post_init__`` applies the reference's rules
(:mod:`.resolve`): method/format resolution, 5/6/7-bit GPTQ routed to ``gptq_p``, per-family forced
values. Every automatic change is recorded in ``notes``; fields the reference knows but this object
does not model are kept in ``settings``; unrecognized fields are kept in ``unknown`` and written back.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..enums import FORMAT, METHOD
from ..errors import ConfigError
from .dynamic import DynamicRules
from .resolve import Resolved, check_bits, resolve

CONFIG_VERSION = 1
META_VERSION_KEY = "qformats_config_version"
PACK_DTYPES = ("int8", "int16", "int32", "int64")
# Families whose words are int16 whatever the file says (the reference's GEMV_FAST / LLM_AWQ export).
INT16_FAMILIES: tuple[FORMAT, ...] = (FORMAT.GEMV_FAST, FORMAT.LLM_AWQ)


@dataclass(frozen=True)
class ModuleSpec:
    """The effective quantization of one module after dynamic overrides (see ``for_module``)."""

    bits: int
    group_size: int
    sym: bool
    desc_act: bool
    format: str
    pack_dtype: str
    override: Mapping[str, Any] = field(default_factory=dict)


def _bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{name}: expected true or false, found {value!r}")
    return value


@dataclass(frozen=True, eq=False)
class QuantizeConfig:
    """One quantization config (reference field names; see the module docstring)."""

    bits: int | float | str | None = None  # None: the family default (8 for FP8, else 4); float: EXL3 bpw
    group_size: int = 128
    sym: bool = True
    desc_act: bool | None = False
    method: METHOD | str | None = None
    format: FORMAT | str | None = None
    pack_dtype: str = "int32"
    lm_head: bool = False
    dynamic: DynamicRules | Mapping[str, Any] | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    settings: Mapping[str, Any] = field(default_factory=dict)
    unknown: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        notes = list(self.notes)
        dyn = self.dynamic
        if dyn is not None and not isinstance(dyn, DynamicRules):
            dyn = DynamicRules.from_mapping(dyn)
        if dyn is not None and len(dyn) == 0:
            dyn = None
        settings = dict(self.settings)
        resolved: Resolved = resolve(
            self.method,
            self.format,
            self.bits,
            dynamic_bits=dyn.positive_bits() if dyn is not None else (),
            backend=settings.get("backend"),
            notes=notes,
        )
        check_bits(resolved)
        pack_dtype = str(self.pack_dtype).strip().lower().removeprefix("torch.")
        if pack_dtype not in PACK_DTYPES:
            raise ConfigError(f"pack_dtype: expected one of {list(PACK_DTYPES)}, found {self.pack_dtype!r}")
        if resolved.family in INT16_FAMILIES and pack_dtype != "int16":
            notes.append(f"{resolved.family.value} packs int16 words: pack_dtype {pack_dtype!r} replaced by 'int16'")
            pack_dtype = "int16"
        group_size = self.group_size
        if isinstance(group_size, bool) or not isinstance(group_size, int):
            raise ConfigError(f"group_size: expected an integer, found {group_size!r}")
        if group_size != -1 and group_size <= 0:
            raise ConfigError(f"group_size: expected -1 or a positive integer, found {group_size}")
        sym = _bool("sym", self.sym)
        desc_act = False if self.desc_act is None else _bool("desc_act", self.desc_act)
        if resolved.family is FORMAT.FP8:
            group_size, sym, desc_act = -1, True, False
        if resolved.family in (FORMAT.BITSANDBYTES, FORMAT.BITBLAS) and desc_act:
            notes.append(f"{resolved.family.value} does not support desc_act: set to false")
            desc_act = False
        meta = self.meta if isinstance(self.meta, Mapping) else None
        if meta is None:
            raise ConfigError(f"meta: expected an object, found {type(self.meta).__name__}")
        written = meta.get(META_VERSION_KEY, CONFIG_VERSION)
        if not isinstance(written, int) or written > CONFIG_VERSION:
            raise ConfigError(
                f"meta.{META_VERSION_KEY}: this qformats reads config versions <= {CONFIG_VERSION}, found {written!r}"
            )
        values = {
            "bits": resolved.bits,
            "group_size": group_size,
            "sym": sym,
            "desc_act": desc_act,
            "method": resolved.method,
            "format": resolved.format,
            "pack_dtype": pack_dtype,
            "lm_head": _bool("lm_head", self.lm_head),
            "dynamic": dyn,
            "meta": dict(meta),
            "settings": settings,
            "unknown": dict(self.unknown),
            "notes": tuple(notes),
        }
        for name, value in values.items():
            object.__setattr__(self, name, value)

    # -- derived views -------------------------------------------------------------------------
    @property
    def family(self) -> FORMAT:
        """The layout family (``nf4`` -> BITSANDBYTES, ``q_k_m`` -> GGUF, ``gptq_p`` -> GPTQ_P)."""
        from ..enums import resolve_format_family

        return resolve_format_family(self.format, self.method)

    @property
    def layout(self) -> str:
        """The layout registry key of this config's modules (AWQ-produced Marlin is ``awq_marlin``)."""
        family = self.family
        if family is FORMAT.MARLIN and self.method is METHOD.AWQ:
            return "awq_marlin"
        return family.value

    @property
    def rules(self) -> DynamicRules | None:
        """The dynamic rules (always a :class:`DynamicRules` after construction, or None)."""
        return self.dynamic if isinstance(self.dynamic, DynamicRules) else None

    @property
    def width(self) -> int:
        """``bits`` as an int (after construction ``bits`` is the integer code width; EXL3's float
        bits-per-weight, e.g. ``2.5``, rounds up: its modules read their own width from the trellis)."""
        if isinstance(self.bits, float):
            return math.ceil(self.bits)
        return int(self.bits) if self.bits is not None else 4

    def for_module(self, module: str) -> ModuleSpec | None:
        """Effective settings of ``module`` (full dotted name); ``None`` when a negative rule excludes it."""
        override: Mapping[str, Any] = {}
        rules = self.rules
        if rules is not None:
            if rules.excluded(module):
                return None
            override = rules.override(module)
        return ModuleSpec(
            bits=int(override.get("bits", self.width)),
            group_size=int(override.get("group_size", self.group_size)),
            sym=bool(override.get("sym", self.sym)),
            desc_act=bool(override.get("desc_act", bool(self.desc_act))),
            format=str(self.format),
            pack_dtype=self.pack_dtype,
            override=dict(override),
        )

    def with_changes(self, **changes: Any) -> QuantizeConfig:
        """A new config with ``changes`` applied and the rules re-run (notes are kept)."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object to write (canonical and alias fields; see :mod:`.serialize`)."""
        from .serialize import config_to_dict

        return config_to_dict(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, QuantizeConfig):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash((self.bits, self.group_size, str(self.format)))
