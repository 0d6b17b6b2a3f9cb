"""The calibrated methods' settings (GPTQ family, AWQ, RTN, QQQ, ParoQuant), checked and resolved into
``QuantizeConfig.settings`` by :func:`qhf.quant_config.read_quantize_config`.

Each setting takes the reference's default when absent (:data:`DEFAULTS`; QQQ's damping defaults are its own,
:data:`qhf.qqq_settings.DEFAULTS`). ``gptaq`` / ``foem`` sections get their default terms; ``adapter`` its
default name and path; ``rotation`` its resolved form (:mod:`qhf.rotation.setting`; ``{"kind": "none"}`` by
default). ``act_group_aware`` left unset resolves as the reference's default does: on for GPTQ with
groups (``group_size > 0``) and without ``desc_act``, off otherwise (the reference refuses it per channel; the
ordering changes nothing there, so lowbit turns it off instead). It also resolves off with a ``gptaq`` or
``foem`` section: the reference's GPTAQ/FOEM solves visit columns in natural order whatever the setting. Set
explicitly, it must not be combined with ``desc_act`` and only GPTQ accepts it. ``awq_scales: true`` (lowbit's,
off by default) solves GPTQ on AWQ-scaled weights (qlooper's ``awq_gptq``); GPTQ only, not with a ``gptaq`` /
``foem`` section or an EoRA ``adapter``; it writes GPTQ's formats or AWQ's (then without ``desc_act``), and
asymmetric weights not in the ``gptq`` (v1) format.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from qformats.config import QuantizeConfig
from qformats.config.quantizer_formats import formats_without_g_idx

from .methods.builtin_settings import CalibratedSettings
from .methods.closed_settings import settings_dict
from .methods.method import QuantMethod
from .methods.registry import get_method
from .quant_config import QuantConfigError
from .rotation.setting import configured_rotation

#: The settings of a calibrated run and their defaults (the reference's): the fields of the built-in methods'
#: typed settings class, :class:`qhf.methods.builtin_settings.CalibratedSettings`.
DEFAULTS: Mapping[str, Any] = MappingProxyType(settings_dict(CalibratedSettings()))
GPTAQ_DEFAULTS = {"alpha": 0.25}
FOEM_DEFAULTS = {"alpha": 0.0, "beta": 0.2}


def calibrated_settings(method: str, cfg: QuantizeConfig) -> dict[str, Any]:
    """The :data:`DEFAULTS` settings of a ``method`` run on ``cfg``, resolved (raises naming the field); the
    method's own defaults (``QuantMethod.default_settings``: QQQ's damping) and recipe checks
    (``settings_problem``) are its object's."""
    quant_method = get_method(method)
    out = {**DEFAULTS, **{k: cfg.settings[k] for k in DEFAULTS if k in cfg.settings}}
    out.update({k: cfg.settings.get(k, v) for k, v in quant_method.default_settings().items()})
    out["gptaq"] = _section("gptaq", out["gptaq"], GPTAQ_DEFAULTS, quant_method)
    out["foem"] = _section("foem", out["foem"], FOEM_DEFAULTS, quant_method)
    if out["gptaq"] is not None and out["foem"] is not None:
        raise QuantConfigError(
            "gptaq, foem: choose one (FOEM's alpha is GPTAQ's term: foem {alpha: 0.25, beta: 0.2} is both)"
        )
    out["adapter"] = _adapter(out["adapter"], quant_method)
    out["rotation"] = configured_rotation(cfg.settings, cfg.meta)
    out["awq_scales"] = _awq_scales(out, quant_method, cfg)
    desc_act = bool(cfg.desc_act)
    gar = out["act_group_aware"]
    if gar is None:  # the reference's GPTAQ/FOEM solves ignore act_group_aware: natural order there
        variant = out["gptaq"] is not None or out["foem"] is not None
        gar = quant_method.group_aware_default and cfg.group_size != -1 and not desc_act and not variant
    elif gar and desc_act:
        raise QuantConfigError("act_group_aware: requires desc_act=False (the two orderings are alternatives)")
    elif gar and quant_method.natural_order:
        raise QuantConfigError(f"act_group_aware: {method.upper()} keeps the natural column order; only GPTQ reorders")
    out["act_group_aware"] = bool(gar)
    problem = quant_method.settings_problem(cfg, out)
    if problem is not None:
        raise QuantConfigError(problem)
    return out


def _section(name: str, value: Any, defaults: dict[str, float], method: QuantMethod) -> dict[str, float] | None:
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
    if not method.gptq_variants:
        raise QuantConfigError(f"{name}: a GPTQ variant; method {method.name!r} cannot use it")
    out = {}
    for key, default in defaults.items():
        number = value.get(key, default)
        if isinstance(number, bool) or not isinstance(number, (int, float)) or not 0.0 <= float(number) <= 1.0:
            raise QuantConfigError(f"{name}.{key}: expected a number in [0, 1], found {number!r}")
        out[key] = float(number)
    return out


def _adapter(value: Any, method: QuantMethod) -> dict[str, Any] | None:
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
    if not method.gptq_variants:
        raise QuantConfigError(f"adapter: EoRA follows a GPTQ-family solve; method {method.name!r} cannot use it")
    return {"name": "lora", "path": path, "rank": rank}


def _awq_scales(resolved: dict[str, Any], method: QuantMethod, cfg: QuantizeConfig) -> bool:
    """The ``awq_scales`` field: true or false; true only for GPTQ without a ``gptaq`` / ``foem`` section or an
    ``adapter`` (their solves and covariances read the unscaled weights and inputs), and not asymmetric in the
    ``gptq`` (v1) layout: v1 stores ``zero - 1``, and AWQ-scaled groups whose minimum is just below zero take a
    true zero of 0 (SmolLM2 at group 64 did), which it cannot write."""
    value = resolved["awq_scales"]
    if value is None:
        return False
    if not isinstance(value, bool):
        raise QuantConfigError(f"awq_scales: expected true or false, found {value!r}")
    if not value:
        return False
    if not method.gptq_variants:
        raise QuantConfigError(f"awq_scales: GPTQ on AWQ-scaled weights; method {method.name!r} cannot use it")
    others = [name for name in ("gptaq", "foem", "adapter") if resolved[name] is not None]
    if others:
        raise QuantConfigError(f"awq_scales: not combined with {', '.join(others)} (a GPTQ variant of its own)")
    if cfg.desc_act and cfg.format in formats_without_g_idx():
        raise QuantConfigError(
            f"awq_scales: desc_act permutes the groups (g_idx), which format {cfg.format!r} (AWQ's layout) cannot "
            "store; use a gptq format or the default group-aware order"
        )
    if not cfg.sym and cfg.format == "gptq":
        raise QuantConfigError(
            "awq_scales: asymmetric weights in format 'gptq' (v1 stores zero - 1: a true zero of 0, which AWQ-scaled "
            "groups produce, cannot be written); use format 'gemm' (AWQ's layout) or 'gptq_v2'"
        )
    return True
