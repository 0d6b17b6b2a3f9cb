"""lowbit's built-in methods as :class:`~qhf.methods.QuantMethod` objects: ``gptq``, ``awq``, ``rtn``, ``qqq``,
``paroquant`` (calibrated) and ``fp8``, ``bitsandbytes``, ``gguf`` (weight-only).

Their formats are qformats' stored-field facts (:data:`qformats.config.QUANTIZER_FORMATS`, ``DEFAULT_FORMATS``);
their settings are resolved by qhf's readers (:mod:`qhf.calibrated_settings`, :mod:`qhf.weight_only_settings`,
called from :func:`qhf.quant_config.read_quantize_config`) and read here through the typed classes of
:mod:`.builtin_settings`. The hooks hold the code the config views and spec builder used to branch on by name, so
the checkpoints they write are unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from qformats.config.quantizer_formats import DEFAULT_FORMATS, QUANTIZER_FORMATS

from .builtin_settings import CalibratedSettings, WeightOnlySettings
from .cli_flags import CALIBRATED_FLAGS, FP8_FLAGS, GPTQ_FLAGS, INTEGER_FLAGS, PAROQUANT_FLAGS, MethodFlag
from .method import QuantMethod

if TYPE_CHECKING:
    from qformats.config import QuantizeConfig

#: The calibrated settings written under a checkpoint's ``meta`` (in this order, after ``quantizer``, ``algorithm``).
META_SETTINGS = ("damp_percent", "damp_auto_increment", "static_groups", "true_sequential", "mse", "act_group_aware")


class BuiltinMethod(QuantMethod):
    """A lowbit method: formats from qformats' table, settings resolved by qhf's readers (module docstring)."""

    builtin = True

    def __init__(self, name: str, summary: str, processor_name: str = "", cli_name: str = "") -> None:
        self.name = name
        self.summary = summary
        self.processor_name = processor_name or name
        self.cli_name = cli_name
        self.formats = tuple(QUANTIZER_FORMATS[name])
        self.default_format = DEFAULT_FORMATS.get(name)

    def settings(self, cfg: QuantizeConfig) -> Any:
        """The typed view of the resolved settings (values as the reader resolved them, not coerced)."""
        names = {f.name for f in dataclasses.fields(self.settings_type)}
        return self.settings_type(**{k: v for k, v in cfg.settings.items() if k in names})

    def checkpoint_method(self, cfg: QuantizeConfig) -> str:
        return self.name

    def checkpoint_fields(self, cfg: QuantizeConfig) -> dict[str, Any]:
        return {}  # written by qhf.checkpoint_config in the reference's places


class CalibratedMethod(BuiltinMethod):
    """GPTQ (and its GPTAQ / FOEM / ``awq_scales`` variants, EoRA), AWQ, RTN, QQQ: a qalgos ``QuantSpec``."""

    settings_type = CalibratedSettings
    cli_flags = (*INTEGER_FLAGS, *CALIBRATED_FLAGS)
    #: the dtype solved scales are rounded to (QQQ keeps float32: it splits them into its two scale levels)
    scale_dtype = "float16"

    def true_sequential(self, cfg: QuantizeConfig) -> bool:
        return bool(self.settings(cfg).true_sequential)

    def spec(self, cfg: QuantizeConfig) -> Any:
        """``QuantSpec`` scales rounded to float16 as solved so the checkpoint is exact (QQQ keeps float32 scales:
        it splits them into its two scale levels, :mod:`qalgos.qqq`)."""
        from qalgos.spec import QuantSpec

        own: CalibratedSettings = self.settings(cfg)
        return QuantSpec(
            bits=cfg.width,
            group_size=cfg.group_size,
            sym=cfg.sym,
            desc_act=bool(cfg.desc_act),
            static_groups=own.static_groups,
            act_group_aware=bool(own.act_group_aware),  # resolved to a bool by read_quantize_config
            damp_percent=own.damp_percent,
            damp_auto_increment=own.damp_auto_increment,
            mse=own.mse,
            scale_dtype=self.scale_dtype,
        )

    def processor(self, cfg: QuantizeConfig, spec: Any, module_specs: dict[str, Any]) -> Any:
        """GPTAQ / FOEM with a section, ``awq_gptq`` with ``awq_scales``, EoRA around it with an ``adapter``
        (:func:`qhf.looper_bridge.make_quant_processor`)."""
        from ..looper_bridge import make_quant_processor

        return make_quant_processor(cfg, spec, module_specs)

    def meta_settings(self, cfg: QuantizeConfig) -> dict[str, Any]:
        from ..config_view import setting

        return {name: setting(cfg, name) for name in META_SETTINGS}


class GPTQMethod(CalibratedMethod):
    """GPTQ: its variants' flags (GPTAQ, FOEM, AWQ scales, EoRA, presets); plain GPTQ runs its layer forwards in
    bfloat16 / float16 when asked."""

    cli_flags = (*CalibratedMethod.cli_flags, *GPTQ_FLAGS)
    takes_compute_dtype = True
    gptq_variants = True
    group_aware_default = True
    takes_budget = True

    def run_formats(self, settings: Mapping[str, Any]) -> tuple[str, ...]:
        """GPTQ on AWQ-scaled weights writes AWQ's layouts too (its scales are folded either way)."""
        if self.follows_format(settings):
            return (*self.formats, *QUANTIZER_FORMATS["awq"])
        return self.formats

    def follows_format(self, settings: Mapping[str, Any]) -> bool:
        return settings.get("awq_scales") is True

    def checkpoint_method(self, cfg: QuantizeConfig) -> str:
        """GPTQ on AWQ-scaled weights (``awq_scales``) is stored as the family its format belongs to."""
        if self.settings(cfg).awq_scales:
            return self.written_method(str(cfg.format))
        return self.name


class AWQMethod(CalibratedMethod):
    """AWQ: natural column order; no mixed-precision budget."""

    natural_order = True
    budget_refusal = "the AWQ layouts engines read hold 4-bit codes only"

    def stored_layout_fields(self, cfg: QuantizeConfig) -> tuple[dict[str, Any], dict[str, Any]]:
        """AWQ's ``zero_point`` and ``version`` (the format)."""
        return {"zero_point": not cfg.sym, "version": cfg.format}, {}


class RTNMethod(CalibratedMethod):
    """RTN: no calibration (unless a ``bits_budget`` is still to be resolved: its sensitivity pass reads rows);
    stored as the family its format belongs to."""

    spreads_over_ray = False  # no calibration forwards, no solves
    takes_budget = True

    def follows_format(self, settings: Mapping[str, Any]) -> bool:
        return True

    def checkpoint_method(self, cfg: QuantizeConfig) -> str:
        return self.written_method(str(cfg.format))

    def needs_calibration(self, cfg: QuantizeConfig) -> bool:
        from ..config_view import needs_allocation

        return needs_allocation(cfg)


class QQQMethod(CalibratedMethod):
    """QQQ: GPTQ on QQQ's grids (float32 scales, :meth:`CalibratedMethod.spec`); its shapes are its weight family's."""

    scale_dtype = "float32"

    def default_settings(self) -> Mapping[str, Any]:
        """The reference's QQQ damping defaults (:data:`qhf.qqq_settings.DEFAULTS`)."""
        from ..qqq_settings import DEFAULTS

        return DEFAULTS

    def settings_problem(self, cfg: QuantizeConfig, settings: Mapping[str, Any]) -> str | None:
        """QQQ's recipe: 4-bit, symmetric, group 128 or per channel ... (:func:`qhf.qqq_settings.qqq_problem`)."""
        from ..qqq_settings import qqq_problem

        return qqq_problem(cfg, settings)

    def stored_layout_fields(self, cfg: QuantizeConfig) -> tuple[dict[str, Any], dict[str, Any]]:
        """``sym`` and ``wbits``: vLLM's QQQ loader reads the weight width from ``wbits`` (as the reference
        writes)."""
        return {"sym": cfg.sym, "wbits": cfg.width}, {}


class ParoQuantMethod(CalibratedMethod):
    """ParoQuant: a qalgos ``ParoSpec`` from its settings (:mod:`qhf.paroquant_settings`); every module alike."""

    cli_flags = (*CalibratedMethod.cli_flags, *PAROQUANT_FLAGS)

    def check_config(self, cfg: QuantizeConfig) -> None:
        """ParoQuant's fixed choices (:func:`qhf.paroquant_settings.refuse_unsupported`)."""
        from ..paroquant_settings import refuse_unsupported

        refuse_unsupported(cfg)

    def stored_layout_fields(self, cfg: QuantizeConfig) -> tuple[dict[str, Any], dict[str, Any]]:
        """The reference's fields: ``zero_point``, ``krot``; ``opt_*`` under meta
        (:func:`qhf.paroquant_settings.checkpoint_fields`)."""
        from ..paroquant_settings import checkpoint_fields

        return checkpoint_fields(cfg)

    def spec(self, cfg: QuantizeConfig) -> Any:
        from ..paroquant_settings import paro_spec

        return paro_spec(cfg)

    def module_specs(self, cfg: QuantizeConfig, modules: list[str]) -> dict[str, Any]:
        return {}


class WeightOnlyMethod(BuiltinMethod):
    """FP8, bitsandbytes, GGUF: a qalgos ``WeightOnlySpec``, qlooper's ``WeightOnlyProcessor``."""

    settings_type = WeightOnlySettings
    weight_only = True
    calibrated = False
    cli_flags: tuple[MethodFlag, ...] = ()

    def spec(self, cfg: QuantizeConfig) -> Any:
        from ..weight_only import weight_only_spec

        return weight_only_spec(cfg)

    def module_specs(self, cfg: QuantizeConfig, modules: list[str]) -> dict[str, Any]:
        """FP8 / bitsandbytes quantize every module alike."""
        return {}

    def processor(self, cfg: QuantizeConfig, spec: Any, module_specs: dict[str, Any]) -> Any:
        """qlooper's ``WeightOnlyProcessor`` (a GGUF mixture's modules with their own spec)."""
        from qlooper.processors.weight_only import WeightOnlyProcessor

        return WeightOnlyProcessor(spec, module_specs=module_specs)


class FP8Method(WeightOnlyMethod):
    """FP8: 8-bit codes, its scale granularity flags."""

    cli_flags = FP8_FLAGS
    default_bits = 8

    def bits_format(self, bits: Any, fmt: str | None) -> tuple[Any, str]:
        from ..weight_only_settings import fp8_bits_format

        return fp8_bits_format(bits, fmt, str(self.default_format))


class BitsAndBytesMethod(WeightOnlyMethod):
    """bitsandbytes (``--method nf4``): NF4 from the command line, int8 with ``--bits 8`` (a config's default is
    ``fp4``, the reference's)."""

    def flag_format(self, bits: int | None) -> str | None:
        return "int8" if bits == 8 else "nf4"

    def bits_format(self, bits: Any, fmt: str | None) -> tuple[Any, str]:
        from ..weight_only_settings import bnb_bits_format

        return bnb_bits_format(bits, fmt, str(self.default_format), self.name)


class GGUFMethod(WeightOnlyMethod):
    """GGUF blocks: a K-quant mixture's modules get their own block types."""

    stores_group_fields = False
    mixture_formats = ("q_k_m", "q_k_s")

    def stored_dynamic(self, cfg: QuantizeConfig) -> dict[str, dict[str, Any]] | None:
        """The config's per-module overrides (rule key -> ``{"bits", "format"}``), checked; None without."""
        if cfg.rules is None:
            return None
        from ..gguf_settings import gguf_dynamic

        return gguf_dynamic(cfg.rules.to_mapping()) or None

    def module_specs(self, cfg: QuantizeConfig, modules: list[str]) -> dict[str, Any]:
        """A GGUF config's ``dynamic`` types (:func:`qhf.weight_only.module_specs`)."""
        from ..weight_only import module_specs as gguf_module_specs

        return gguf_module_specs(cfg, modules)

    def bits_format(self, bits: Any, fmt: str | None) -> tuple[Any, str]:
        """``bits`` + public format, or a ``q4_k_m`` style alias (:func:`qhf.gguf_settings.gguf_bits_format`)."""
        from ..gguf_settings import gguf_bits_format

        return gguf_bits_format(bits, fmt)

    def check_config(self, cfg: QuantizeConfig) -> None:
        """A GGUF config's ``dynamic`` rules each name a GGUF type (:func:`qhf.gguf_settings.gguf_dynamic`)."""
        if cfg.rules is not None:
            from ..gguf_settings import gguf_dynamic

            gguf_dynamic(cfg.rules.to_mapping())


def builtin_methods() -> tuple[QuantMethod, ...]:
    """The built-in methods, in qformats' table order."""
    return (
        GPTQMethod("gptq", "GPTQ: Hessian-based column solve (GPTAQ / FOEM / AWQ-scaled variants, EoRA)"),
        AWQMethod("awq", "AWQ: activation-aware per-channel scales, then RTN"),
        RTNMethod("rtn", "round to nearest, no calibration"),
        FP8Method("fp8", "FP8 weights with row / tensor / block scales"),
        BitsAndBytesMethod(
            "bitsandbytes", "bitsandbytes NF4 / FP4 / int8", processor_name="weight_only", cli_name="nf4"
        ),
        GGUFMethod("gguf", "GGUF blocks (Q4_0 ... Q6_K, K-quant mixtures)"),
        QQQMethod("qqq", "QQQ: GPTQ on QQQ's 4-bit grids, two scale levels"),
        ParoQuantMethod("paroquant", "ParoQuant: learned pairwise rotations, then AWQ-layout codes"),
    )
