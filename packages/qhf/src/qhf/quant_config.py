"""Reading a user's quantization config into the one config object: :class:`qformats.config.QuantizeConfig`.

Accepts a plain dict in the reference's vocabulary (``bits``, ``group_size``, ``sym``, ``desc_act``,
``method``, ``format``, ``damp_percent`` ...; ``quant_method``/``checkpoint_format``/``zero_point`` aliases),
a ``QuantizeConfig``, or any object with ``to_dict()``. It is parsed once, by qformats (aliases that disagree
are refused, unknown keys kept in ``QuantizeConfig.unknown``); :func:`read_quantize_config` adds qhf's checks
and resolves the run's values into the config itself, so every later step reads only that object:

* ``meta["algorithm"]``: the run's method as the user named it (``rtn`` included; see
  :func:`qhf.config_view.algorithm`); RTN and GPTQ with ``awq_scales`` write GPTQ's or AWQ's formats, the
  config's method following the format;
* ``settings``: the calibrated methods' settings with their defaults (:mod:`qhf.calibrated_settings`) or the
  weight-only methods' (:mod:`qhf.weight_only_settings`); a ``bits_budget`` with its ``bits_candidates``
  (:mod:`qhf.mixed_precision.settings`).

The method is looked up in qhf's method registry (:mod:`qhf.methods`); a third-party method's config takes its
formats and its closed settings class instead (every non-canonical key must be one of its settings).

Reading a config that was read before (or a checkpoint's saved config) gives an equal config. The qalgos
specs are built from it by :mod:`qhf.spec_from_config`; the dict written on save by :mod:`qhf.checkpoint_config`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from qformats.config import QuantizeConfig

from .errors import QHFError
from .methods import MethodSettingsError, QuantMethod, find_method, method_names

if TYPE_CHECKING:
    from qformats.config.aliases import FoldedConfig

SOURCE = "quant_config"


class QuantConfigError(QHFError, ValueError):
    """The quantization config is malformed or contradictory (names the field)."""


def _as_dict(config: Any) -> dict[str, Any]:
    if config is None:
        return {}
    if isinstance(config, dict):
        return dict(config)
    if hasattr(config, "to_dict"):
        return dict(config.to_dict())
    raise QuantConfigError(
        f"quant_config: expected a dict, a QuantizeConfig or an object with to_dict(), found {type(config).__name__}"
    )


def read_quantize_config(config: Any) -> QuantizeConfig:
    """The :class:`QuantizeConfig` of a user's ``config`` (see the module docstring), checked and resolved.

    qformats folds the aliases (refusing aliases of one field that disagree, e.g. ``bits`` 4 with ``wbits`` 8),
    lifts the reference's settings from ``meta`` and keeps unknown keys (``QuantizeConfig.unknown``). qhf then
    names the run's method (``rtn`` included; a checkpoint's ``meta.algorithm`` wins) and refuses a
    method/format pair outside :data:`~qformats.config.QUANTIZER_FORMATS`, weight-only widths its packers do
    not store and malformed settings, naming the field, before qformats' rules resolve the rest.
    """
    from qformats.config import config_from_folded, fold_aliases
    from qformats.errors import ConfigError

    from .calibrated_settings import calibrated_settings
    from .mixed_precision.settings import budget_settings
    from .weight_only_settings import weight_only_bits_format, weight_only_settings

    try:
        folded = fold_aliases(_as_dict(config), SOURCE)
    except ConfigError as exc:
        raise QuantConfigError(str(exc)) from None
    fields = folded.fields
    method = str(fields.get("method") or "gptq")
    algorithm = fields["meta"].get("algorithm")
    if find_method(algorithm) is not None:
        method = str(algorithm)
    quant_method = find_method(method)
    if quant_method is None:
        raise QuantConfigError(f"method: expected one of {', '.join(method_names())}, found {method!r}")
    if not quant_method.builtin:
        return _third_party_config(quant_method, folded)
    fmt = fields.get("format")
    bits = fields.get("bits")
    forced: dict[str, Any] = {}
    if quant_method.weight_only:
        if folded.settings.get("adapter") is not None:
            raise QuantConfigError(f"adapter: EoRA follows a GPTQ-family solve; method {method!r} cannot use it")
        if folded.settings.get("rotation") not in (None, False, "none", {"kind": "none"}):
            raise QuantConfigError(
                f"rotation: folded rotations are a setting of the calibrated methods (gptq, awq, rtn ...); method "
                f"{method!r} cannot use it"
            )
        bits, fmt = weight_only_bits_format(method, bits, fmt)
        resolved_method = method
        # the reference's forced fields: no groups, no act-order, symmetric, int32 words
        forced = {"group_size": -1, "sym": True, "desc_act": False, "pack_dtype": "int32"}
    else:
        fmt = quant_method.format_or_default(fmt)
        # GPTQ on AWQ-scaled weights writes either family's layouts, as RTN does (its scales are folded either way)
        either = quant_method.follows_format(folded.settings)
        formats = quant_method.run_formats(folded.settings)
        if fmt not in formats:
            with_scales = " with awq_scales" if either and quant_method.gptq_variants else ""
            raise QuantConfigError(
                f"format: method {method!r}{with_scales} writes one of {', '.join(formats)}, found {fmt!r}"
            )
        resolved_method = quant_method.written_method(fmt) if either else method
    try:
        parsed = config_from_folded(folded, source=SOURCE, method=resolved_method, format=fmt, bits=bits)
    except ConfigError as exc:
        raise QuantConfigError(str(exc)) from None
    if quant_method.weight_only:
        settings = weight_only_settings(method, parsed)
    else:
        _check_bits(parsed.bits)
        settings = calibrated_settings(method, parsed)
    settings.update(budget_settings(method, parsed))  # {} without a bits_budget
    try:
        resolved = parsed.with_changes(
            settings={**parsed.settings, **settings}, meta={**parsed.meta, "algorithm": method}, **forced
        )
    except ConfigError as exc:
        raise QuantConfigError(str(exc)) from None
    quant_method.check_config(resolved)  # a method's fixed choices (ParoQuant's)
    return resolved


def _check_bits(bits: Any) -> None:
    """The calibrated methods' integer widths: 2..8 (names the field)."""
    if isinstance(bits, bool) or not isinstance(bits, int) or not 2 <= bits <= 8:
        raise QuantConfigError(f"bits: expected an integer in 2..8, found {bits!r}")


def _third_party_config(method: QuantMethod, folded: FoldedConfig) -> QuantizeConfig:
    """A third-party method's config (:mod:`qhf.methods`): its format (default: its own) among the formats it
    writes, stored under :meth:`~qhf.methods.QuantMethod.written_method`, integer ``bits`` in 2..8, and every key
    beyond the canonical fields resolved by its closed settings class (an unknown key, lowbit's own settings such
    as ``rotation`` or ``bits_budget`` included, is refused naming it and the accepted ones)."""
    from qformats.config import config_from_folded
    from qformats.errors import ConfigError

    fields = folded.fields
    fmt = method.format_or_default(fields.get("format"))
    if fmt not in method.formats:
        raise QuantConfigError(
            f"format: method {method.name!r} writes one of {', '.join(method.formats)}, found {fmt!r}"
        )
    given = {**folded.settings, **folded.unknown}
    try:
        parsed = config_from_folded(
            folded, source=SOURCE, method=method.written_method(fmt), format=fmt, bits=fields.get("bits")
        )
    except ConfigError as exc:
        raise QuantConfigError(str(exc)) from None
    _check_bits(parsed.bits)
    try:
        settings = method.resolve_settings(parsed, given)
    except MethodSettingsError as exc:
        raise QuantConfigError(str(exc)) from None
    try:
        resolved = parsed.with_changes(settings=settings, unknown={}, meta={**parsed.meta, "algorithm": method.name})
    except ConfigError as exc:
        raise QuantConfigError(str(exc)) from None
    method.check_config(resolved)
    return resolved
