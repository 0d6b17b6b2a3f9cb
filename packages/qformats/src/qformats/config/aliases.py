"""Field aliases of quantization config JSON, folded into canonical names with a record of each step.

``fold_aliases(raw)`` lower-cases keys and maps every alias the reference reads:

* ``w_bit`` / ``wbits`` -> ``bits``; ``q_group_size`` -> ``group_size``;
* ``zero_point`` -> ``sym = not zero_point``;
* ``checkpoint_format`` -> ``format`` (only a hint: an explicit ``format`` wins), AWQ ``version`` -> ``format``;
* ``quant_method`` -> ``method`` (with ``method``, the key that comes **later** in the file wins, as in
  the reference reader); a method value ``marlin`` / ``bitblas`` is a layout hint and sets ``format``;
* ``bnb_quant_type`` / ``bnb_block_size`` / ``bnb_compress_statistics`` -> ``format`` / ``block_size`` /
  ``compress_statistics``;
* ``is_marlin_format`` is refused outright.

Aliases of one value that disagree (``bits: 4`` with ``wbits: 8``) are an error, never a silent pick.
Known reference settings (``damp_percent`` ...) are lifted from ``meta`` when absent at top level.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..enums import FORMAT
from ..errors import ConfigError

# Fields the reference reads and writes that this object carries verbatim (no semantics here), and lowbit's
# ``awq_scales`` (GPTQ on AWQ-scaled weights).
SETTINGS_KEYS: frozenset[str] = frozenset(
    {
        "true_sequential", "damp_percent", "damp_auto_increment", "static_groups", "mse", "act_group_aware",
        "activation", "rotation", "adapter", "offload_to_disk", "offload_to_disk_path", "pack_impl", "fallback",
        "hessian", "gptaq", "foem", "gc_mode", "moe", "device", "mock_quantization", "weight_only",
        "wait_for_submodule_finalizers", "block_size", "compress_statistics", "weight_scale_method",
        "weight_block_size", "weight_scale_semantics", "backend", "modules_to_not_convert", "krot",
        "vector_lens", "num_centroids", "num_res_centroids", "npercent", "group_num", "kmeans_mode", "kmeans_iters",
        "kmeans_tol", "kmeans_seed", "enable_norm", "norm_dim", "enable_perm", "percdamp", "awq_scales",
        # lowbit's own: mixed precision under a stored-bits budget (qhf.mixed_precision); GPT-QModel ignores them
        "bits_budget", "bits_candidates",
    }
)  # fmt: skip
# Settings the reference lifts from ``meta`` when they are absent at top level (and lowbit's ``awq_scales``,
# which its checkpoints record under ``meta`` as the reference records ``gptaq``).
META_LIFTED: frozenset[str] = frozenset(
    {
        "fallback", "hessian", "gptaq", "foem", "mse", "damp_percent", "damp_auto_increment", "act_group_aware",
        "true_sequential", "static_groups", "offload_to_disk", "offload_to_disk_path", "pack_impl", "gc_mode", "moe",
        "wait_for_submodule_finalizers", "mock_quantization", "awq_scales",
    }
)  # fmt: skip
CANONICAL_KEYS: frozenset[str] = frozenset(
    {"bits", "group_size", "sym", "desc_act", "method", "format", "pack_dtype", "lm_head", "dynamic", "meta"}
)
BITS_ALIASES: tuple[str, ...] = ("bits", "w_bit", "wbits")
_ALIAS_GROUPS: dict[str, tuple[str, ...]] = {
    "bits": BITS_ALIASES,
    "group_size": ("group_size", "q_group_size"),
    "block_size": ("block_size", "bnb_block_size"),
    "compress_statistics": ("compress_statistics", "bnb_compress_statistics"),
}
_CONSUMED = {a for names in _ALIAS_GROUPS.values() for a in names} | {
    "zero_point", "checkpoint_format", "version", "quant_method", "bnb_quant_type", "method", "format",
}  # fmt: skip
LAYOUT_HINT_METHODS = ("marlin", "bitblas")


@dataclass
class FoldedConfig:
    """Canonical fields found in a raw config, plus what folding did (``notes``)."""

    fields: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    unknown: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    format_hint: str | None = None  # from checkpoint_format / version / a marlin|bitblas method value


def _same(a: object, b: object) -> bool:
    norm = [str(x).strip().lower() if isinstance(x, str) else x for x in (a, b)]
    return norm[0] == norm[1]


def _lower_keys(raw: Mapping[str, Any], source: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            raise ConfigError(f"{source}: expected string keys, found {key!r}")
        low = key.lower()
        if low in out and not _same(out[low], value):
            raise ConfigError(f"{source}: keys differing only in case disagree on {low!r}: {out[low]!r} vs {value!r}")
        out[low] = value
    return out


def _one_of(data: dict[str, Any], name: str, aliases: tuple[str, ...], source: str, notes: list[str]) -> None:
    present = [(a, data[a]) for a in aliases if a in data]
    if not present:
        return
    first_key, first = present[0]
    for _key, value in present[1:]:
        if not _same(first, value):
            listing = ", ".join(f"{k}={v!r}" for k, v in present)
            raise ConfigError(f"{source}: conflicting aliases for {name!r}: {listing}")
    if first_key != name:
        notes.append(f"alias {first_key!r} read as {name!r}")
    data[name] = first


def fold_aliases(raw: object, source: str = "<config>") -> FoldedConfig:
    """Fold ``raw`` (a parsed JSON object) into canonical fields; :class:`ConfigError` names the problem."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: expected a JSON object, found {type(raw).__name__}")
    data = _lower_keys(raw, source)
    if "is_marlin_format" in data:
        raise ConfigError(
            f"{source}: 'is_marlin_format' is hard-deprecated and refused; "
            "use format 'gptq' (or 'marlin' for legacy Marlin checkpoints) instead"
        )
    out = FoldedConfig()
    notes = out.notes
    for name, aliases in _ALIAS_GROUPS.items():
        _one_of(data, name, aliases, source, notes)
    if "zero_point" in data:
        if not isinstance(data["zero_point"], bool):
            raise ConfigError(f"{source}: zero_point: expected true or false, found {data['zero_point']!r}")
        implied = not data["zero_point"]
        if "sym" in data and data["sym"] != implied:
            raise ConfigError(
                f"{source}: conflicting aliases: sym={data['sym']!r} but zero_point={data['zero_point']!r}"
            )
        if "sym" not in data:
            notes.append("alias 'zero_point' read as sym = not zero_point")
        data["sym"] = implied
    _fold_method(data, out, source)
    _fold_format(data, out)
    for key in ("bits", "group_size", "sym", "desc_act", "pack_dtype", "lm_head", "dynamic"):
        if key in data:
            out.fields[key] = data[key]
    meta = data.get("meta", {})
    if meta is None:
        meta = {}
    if not isinstance(meta, Mapping):
        raise ConfigError(f"{source}: meta: expected an object, found {type(meta).__name__}")
    out.fields["meta"] = dict(meta)
    for key, value in data.items():
        if key in _CONSUMED or key in CANONICAL_KEYS:
            continue
        if key in SETTINGS_KEYS:
            out.settings[key] = value
        else:
            out.unknown[key] = value
            notes.append(f"unknown field {key!r} kept verbatim")
    for key in sorted(META_LIFTED & set(meta)):
        if key not in out.settings:
            out.settings[key] = meta[key]
            notes.append(f"setting {key!r} lifted from meta")
    for key in ("block_size", "compress_statistics"):
        if key in data:
            out.settings[key] = data[key]
    return out


def _fold_method(data: dict[str, Any], out: FoldedConfig, source: str) -> None:
    # The reference processes ``method`` and ``quant_method`` in file order: the later key wins.
    chosen: str | None = None
    seen: list[tuple[str, Any]] = [(k, data[k]) for k in data if k in ("method", "quant_method")]
    for key, value in seen:
        if not isinstance(value, str):
            raise ConfigError(f"{source}: {key}: expected a string, found {value!r}")
        text = value.strip().lower()
        if text in LAYOUT_HINT_METHODS:
            out.format_hint = out.format_hint or text
            out.notes.append(f"{key}={value!r} is a layout hint: read as format {text!r}")
            continue
        if chosen is not None and chosen != text:
            out.notes.append(f"method conflict: {key}={value!r} overrides the earlier {chosen!r} (file order)")
        chosen = text
    if chosen is not None:
        out.fields["method"] = chosen


def _fold_format(data: dict[str, Any], out: FoldedConfig) -> None:
    fmt = data.get("format")
    for key in ("checkpoint_format", "version", "bnb_quant_type"):
        if key not in data or data[key] is None:
            continue
        value = str(data[key]).strip().lower()
        if fmt is None:
            fmt = value
            out.notes.append(f"alias {key!r} read as 'format'")
        elif key == "bnb_quant_type" and str(fmt).strip().lower() == FORMAT.BITSANDBYTES.value:
            fmt = value  # the family name is less specific than the subtype
        elif not _same(fmt, value):
            out.notes.append(f"format {fmt!r} takes precedence over {key}={data[key]!r}")
    if fmt is None and out.format_hint is not None:
        fmt = out.format_hint
    if fmt is not None:
        out.fields["format"] = str(fmt).strip().lower()
