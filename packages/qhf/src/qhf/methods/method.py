"""``QuantMethod``: everything a quantization method is to qhf and the CLI, in one object.

A method owns its name (the config's ``method`` / ``meta.algorithm`` and the ``--method`` value, :attr:`cli_name`),
the formats a run writes (:attr:`formats`, :attr:`default_format`) and the checkpoint method they are stored under
(:meth:`written_method`), its typed, closed settings class (:attr:`settings_type`, a frozen dataclass built by
:func:`~qhf.methods.closed_settings.closed_settings`: unknown keys refused naming them), their resolution
(:meth:`resolve_settings`), whether it reads calibration rows (:meth:`needs_calibration`), the qalgos spec it builds
(:meth:`spec`) and the qlooper processor that solves it (:meth:`processor`; by default the one registered in
``qlooper.processors.registry`` under :attr:`processor_name`), and the fields it adds to the stored config
(:meth:`meta_settings`, :meth:`checkpoint_fields`).

The base class is a complete integer method (RTN-like, GPTQ/AWQ layouts): a third-party method subclasses it,
sets ``name``, ``processor_name`` and ``settings_type``, and overrides :meth:`spec` when its spec is not a plain
qalgos ``QuantSpec``. The built-in methods (:mod:`qhf.methods.builtin`) override the hooks with qhf's existing
resolution, so their checkpoints are unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .cli_flags import INTEGER_FLAGS, MethodFlag
from .closed_settings import closed_settings, settings_dict

if TYPE_CHECKING:
    from qformats.config import QuantizeConfig


@dataclasses.dataclass(frozen=True)
class NoSettings:
    """The settings of a method that has none of its own (every key is refused)."""


class QuantMethod:
    """One quantization method (module docstring). Class attributes describe it; methods are the hooks."""

    #: The config's method name (``meta.algorithm``) and the registry key.
    name: str = ""
    #: The ``lowbit quantize --method`` value (default: :attr:`name`).
    cli_name: str = ""
    #: One line for ``lowbit quantize --help`` and docs.
    summary: str = ""
    #: The formats (qformats layout keys) a run writes, the first the default.
    formats: tuple[str, ...] = ("gptq", "gptq_v2", "gptq_p")
    #: The format written when none is given (None: the first of :attr:`formats`).
    default_format: str | None = None
    #: The typed, closed settings class (a frozen dataclass; :class:`NoSettings` when it has none).
    settings_type: type = NoSettings
    #: The ``qlooper.processors.registry`` name of its processor.
    processor_name: str = ""
    #: Quantized from the weight alone by qlooper's ``WeightOnlyProcessor`` (FP8, bitsandbytes, GGUF).
    weight_only: bool = False
    #: Reads calibration rows (its processor captures layer inputs).
    calibrated: bool = True
    #: One of lowbit's own methods (their configs keep the reference's pass-through fields, see :mod:`.builtin`).
    builtin: bool = False
    #: The ``lowbit quantize`` flags it takes beyond the common ones (:mod:`.cli_flags`; the base: ``--group-size``,
    #: ``--asym``, ``--desc-act``; a third-party method's other flags become its settings of the flag's name).
    cli_flags: tuple[MethodFlag, ...] = INTEGER_FLAGS
    #: The code width when the config gives no ``bits``.
    default_bits: int = 4
    #: Runs its layer forwards in a dtype other than float32 when asked (``--compute-dtype``).
    takes_compute_dtype: bool = False
    #: Has calibration forwards or solves that a Ray cluster can spread (``--ray``).
    spreads_over_ray: bool = True
    #: Takes GPTQ's variant settings: ``gptaq`` / ``foem`` sections, an EoRA ``adapter``, ``awq_scales``.
    gptq_variants: bool = False
    #: ``act_group_aware`` left unset resolves on (with groups, without ``desc_act`` or a variant section).
    group_aware_default: bool = False
    #: Keeps the natural column order: ``act_group_aware: true`` is refused.
    natural_order: bool = False
    #: Takes a ``bits_budget`` (mixed precision widths from a sensitivity pass).
    takes_budget: bool = False
    #: Why it takes no ``bits_budget`` (the end of the refusal).
    budget_refusal: str = "it quantizes every module with its own fixed scheme"
    #: A weight-only method's stored config writes ``group_size`` / ``desc_act`` / ``pack_dtype`` (as -1, False,
    #: int32; GGUF's writes none).
    stores_group_fields: bool = True
    #: The formats that are per-module mixtures (GGUF's ``q_k_m`` / ``q_k_s``: types recorded as ``dynamic``).
    mixture_formats: tuple[str, ...] = ()

    @property
    def flag_name(self) -> str:
        """The ``--method`` value."""
        return self.cli_name or self.name

    def format_or_default(self, fmt: str | None) -> str:
        """``fmt``, or the format written when none is given."""
        return fmt or self.default_format or self.formats[0]

    def flag_format(self, bits: int | None) -> str | None:
        """The format a ``lowbit quantize --method`` run writes when no ``--format`` is given (None: the config's
        default, :meth:`format_or_default`); ``bits``: the ``--bits`` given, or None."""
        return None

    def run_formats(self, settings: Mapping[str, Any]) -> tuple[str, ...]:
        """The formats a run with the given (unresolved) ``settings`` may write (the base: :attr:`formats`)."""
        return self.formats

    def follows_format(self, settings: Mapping[str, Any]) -> bool:
        """Whether a run with ``settings`` is stored under the method its format belongs to
        (:meth:`written_method`: RTN, GPTQ with ``awq_scales``) rather than its own name."""
        return False

    def default_settings(self) -> Mapping[str, Any]:
        """Settings defaults of its own over the calibrated methods' (QQQ's damping)."""
        return {}

    def settings_problem(self, cfg: QuantizeConfig, settings: Mapping[str, Any]) -> str | None:
        """Why ``cfg`` with its resolved calibrated ``settings`` is not a run of this method, naming the field,
        else None."""
        return None

    def check_config(self, cfg: QuantizeConfig) -> None:
        """Refuse a resolved config this method cannot run, naming the field (the base: nothing to refuse)."""

    def written_method(self, fmt: str) -> str:
        """The checkpoint's ``quant_method`` for a run writing ``fmt``: AWQ's formats store ``awq``, the rest
        ``gptq`` (the integer layouts; a method with a family of its own overrides this)."""
        from qformats.config.quantizer_formats import QUANTIZER_FORMATS

        return "awq" if fmt in QUANTIZER_FORMATS["awq"] else "gptq"

    def checkpoint_method(self, cfg: QuantizeConfig) -> str:
        """The method written to the checkpoint of a run on ``cfg``."""
        return self.written_method(str(cfg.format))

    def resolve_settings(self, parsed: QuantizeConfig, given: Mapping[str, Any]) -> dict[str, Any]:
        """The run's settings (stored in ``QuantizeConfig.settings``) from the keys the user ``given`` beyond the
        canonical fields: the :attr:`settings_type` built by ``closed_settings`` (an unknown key raises
        :class:`~qhf.methods.closed_settings.MethodSettingsError` naming it and the accepted ones), with defaults."""
        return settings_dict(closed_settings(self.settings_type, given, method=self.name))

    def settings(self, cfg: QuantizeConfig) -> Any:
        """The typed settings of a resolved ``cfg`` (an instance of :attr:`settings_type`)."""
        names = {f.name for f in dataclasses.fields(self.settings_type)}
        return closed_settings(
            self.settings_type, {k: v for k, v in cfg.settings.items() if k in names}, method=self.name
        )

    def needs_calibration(self, cfg: QuantizeConfig) -> bool:
        """Whether a run of ``cfg`` reads calibration rows."""
        return self.calibrated and not self.weight_only

    def true_sequential(self, cfg: QuantizeConfig) -> bool:
        """qlooper's ``LoopOptions.true_sequential`` for a run of ``cfg`` (groups solved in order, each seeing the
        previous groups' quantized outputs)."""
        return True

    def spec(self, cfg: QuantizeConfig) -> Any:
        """The run's qalgos spec: a ``QuantSpec`` of the config's ``bits`` / ``group_size`` / ``sym`` /
        ``desc_act``, scales rounded to float16 as solved (the stored dtype, so the checkpoint is exact)."""
        from qalgos.spec import QuantSpec

        return QuantSpec(
            bits=cfg.width, group_size=cfg.group_size, sym=cfg.sym, desc_act=bool(cfg.desc_act), scale_dtype="float16"
        )

    def processor(self, cfg: QuantizeConfig, spec: Any, module_specs: dict[str, Any]) -> Any:
        """The qlooper processor of a run on ``cfg``: the one registered under :attr:`processor_name`
        (``qlooper.processors.registry.make_processor``; ``module_specs``: modules' own specs)."""
        from qlooper.processors.registry import make_processor

        return make_processor(self.processor_name or self.name, spec, module_specs=module_specs)

    def shape_problem(self, cfg: QuantizeConfig, module: str, out_features: int, in_features: int) -> str | None:
        """Why the run cannot hold ``module`` (``[out, in]``), as the whole message, else None (asked before any
        work). The base: a zero weight of the config's bits / group size against the format's layout
        (``cannot_represent``); a method whose weight family has a layout of its own (QQQ, ParoQuant, the
        weight-only ones) asks the family (``WeightFamily.shape_problem``, :mod:`qformats.family_shapes`)."""
        from qformats.layouts.registry import get_layout
        from qformats.layouts.stored_size import zero_probe

        from ..weight_only import weight_family

        family = weight_family(cfg)
        if family.read is not None:  # a family of its own: it says which shapes it holds
            problem = family.shape_problem(cfg, out_features, in_features) if family.shape_problem else None
            return None if problem is None else f"method {family.method!r} cannot hold {module}{problem}"
        probe = zero_probe(out_features, in_features, cfg.width, cfg.group_size, cfg.sym)
        reason = get_layout(str(cfg.format)).cannot_represent(probe)
        if reason is None:
            return None
        return (
            f"format {cfg.format!r} cannot hold {module} [{out_features} x {in_features}] at {cfg.width}-bit group "
            f"{cfg.group_size}: {reason}"
        )

    def module_specs(self, cfg: QuantizeConfig, modules: list[str]) -> dict[str, Any]:
        """``{module: spec}`` for the ``modules`` whose spec differs from :meth:`spec`'s after the config's
        per-module ``dynamic`` rules. The base: a rule's ``bits`` / ``group_size`` / ``sym`` / ``desc_act`` on a
        qalgos ``QuantSpec`` (:func:`qhf.spec_from_config.integer_module_specs`); a method whose spec is another
        type refuses rules naming itself."""
        if cfg.rules is None:
            return {}
        from qalgos.spec import QuantSpec

        from ..spec_from_config import integer_module_specs

        base = self.spec(cfg)
        if not isinstance(base, QuantSpec):
            from .registry import MethodError

            raise MethodError(
                f"dynamic: method {self.name!r} builds a {type(base).__name__}, not a QuantSpec; it takes no "
                "per-module rules unless it overrides QuantMethod.module_specs"
            )
        return integer_module_specs(cfg, base, modules)

    def bits_format(self, bits: Any, fmt: str | None) -> tuple[Any, str]:
        """A weight-only method's ``(bits, format)`` for a config's ``bits`` and ``format`` (None: its default),
        refusing what its packer does not store, naming the field; only the weight-only methods are asked."""
        from .registry import MethodError

        raise MethodError(f"method {self.name!r}: not a weight-only method; it has no bits_format")

    def stored_layout_fields(self, cfg: QuantizeConfig) -> tuple[dict[str, Any], dict[str, Any]]:
        """The fields a checkpoint stored under this method's name (:meth:`checkpoint_method`) writes for its
        layout: ``(top level, under meta)``. The base: ``sym`` (GPTQ's layouts)."""
        return {"sym": cfg.sym}, {}

    def stored_dynamic(self, cfg: QuantizeConfig) -> dict[str, dict[str, Any]] | None:
        """A weight-only config's stored per-module overrides (GGUF's types), else None."""
        return None

    def meta_settings(self, cfg: QuantizeConfig) -> dict[str, Any]:
        """Settings written under the stored config's ``meta`` after ``quantizer`` / ``algorithm``."""
        return {}

    def checkpoint_fields(self, cfg: QuantizeConfig) -> dict[str, Any]:
        """Top-level fields the stored config adds (a third-party method: its settings, read back by
        :meth:`resolve_settings` when the checkpoint's config is read with the method installed)."""
        return settings_dict(self.settings(cfg))

    def __repr__(self) -> str:
        return f"<QuantMethod {self.name!r}>"
