"""The processor registry: method name -> the spec type it takes and the factory that builds its processor.

``make_processor(method, spec)`` looks ``method`` up, refuses a spec of another type naming the method and the
expected type, and calls the factory. The built-in methods are registered when this module is imported:

* ``gptq``, ``qqq``, ``awq``, ``rtn`` -- a qalgos ``QuantSpec``;
* ``awq_gptq`` -- a ``QuantSpec``: AWQ's scale search and fold, then GPTQ solves of the scaled weights;
* ``gptaq``, ``foem`` -- a ``QuantSpec`` plus optional alpha/beta ``terms`` (qalgos ``AsymmetricSpec``);
* ``paroquant`` -- a qalgos ``ParoSpec``;
* ``fp8``, ``bnb4``, ``int8``, ``gguf`` and ``weight_only`` -- a qalgos ``WeightOnlySpec`` (of that family;
  ``weight_only`` takes any family).

A third party registers its own with :func:`register_processor` (``replace=True`` to override a name) and
passes the method name to ``qlooper.quantize_model`` with ``format=`` its target layout.

``make_processor(..., module_specs=)`` gives named modules their own spec (``dynamic`` per-module overrides);
only entries registered with ``per_module=True`` take them (``gptq``, ``gptaq``, ``foem``, ``awq_gptq``, ``rtn`` and the
weight-only ones: their factories accept ``module_specs=``); for the others a non-empty mapping is refused
naming the method, never ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from qalgos.gptaq import AsymmetricSpec, foem_defaults, gptaq_defaults
from qalgos.paroquant import ParoSpec
from qalgos.spec import QuantSpec
from qalgos.weight_only import FAMILIES, WeightOnlySpec

from ..errors import ProcessorError
from .awq import AWQProcessor
from .awq_gptq import AWQGPTQProcessor
from .base import Processor
from .gptaq import GPTAQProcessor
from .gptq import GPTQProcessor
from .paroquant import ParoQuantProcessor
from .qqq import QQQProcessor
from .weight_only import WeightOnlyProcessor

SpecT = TypeVar("SpecT")


@dataclass(frozen=True)
class ProcessorEntry(Generic[SpecT]):
    """One registered method: ``spec_type`` (the spec class its factory takes), ``factory(spec) -> Processor``
    and, for methods with alpha/beta terms (GPTAQ, FOEM), ``with_terms(spec, terms) -> Processor``.
    ``per_module``: both also take ``module_specs=`` (full module name -> spec)."""

    method: str
    spec_type: type[SpecT]
    factory: Callable[..., Processor]
    with_terms: Callable[..., Processor] | None = None
    per_module: bool = False

    def build(
        self, spec: SpecT, terms: AsymmetricSpec | None = None, module_specs: dict[str, Any] | None = None
    ) -> Processor:
        """The processor for ``spec`` (``terms`` only for a method registered ``with_terms``; a non-empty
        ``module_specs`` only for one registered ``per_module``)."""
        extra: dict[str, Any] = {}
        if module_specs:
            if not self.per_module:
                raise ProcessorError(
                    f"module_specs: method {self.method!r} quantizes every module with one spec; per-module "
                    f"overrides (dynamic bits / group_size) were given for {len(module_specs)} modules, e.g. "
                    f"{next(iter(sorted(module_specs)))!r}"
                )
            extra["module_specs"] = dict(module_specs)
        if terms is None:
            return self.factory(spec, **extra)
        if self.with_terms is None:
            raise ProcessorError(f"terms: method {self.method!r} takes no alpha/beta terms, found {terms!r}")
        return self.with_terms(spec, terms, **extra)


_REGISTRY: dict[str, ProcessorEntry[Any]] = {}


def register_processor(
    method: str,
    spec_type: type[SpecT],
    factory: Callable[..., Processor],
    *,
    with_terms: Callable[..., Processor] | None = None,
    replace: bool = False,
    per_module: bool = False,
) -> ProcessorEntry[SpecT]:
    """Register ``factory`` as the processor of ``method`` for specs of ``spec_type``; returns the entry.

    A name already registered is refused unless ``replace`` (then the new entry wins). ``per_module``: the
    factory (and ``with_terms``) accept ``module_specs=`` (module docstring)."""
    if not method or not isinstance(method, str):
        raise ProcessorError(f"method: expected a non-empty string, found {method!r}")
    if not isinstance(spec_type, type):
        raise ProcessorError(f"spec_type: method {method!r} needs a spec class, found {spec_type!r}")
    if method in _REGISTRY and not replace:
        raise ProcessorError(
            f"method: {method!r} is already registered (for a {_REGISTRY[method].spec_type.__name__}); "
            f"pass replace=True to override it"
        )
    entry = ProcessorEntry(method, spec_type, factory, with_terms, per_module)
    _REGISTRY[method] = entry
    return entry


def unregister_processor(method: str) -> None:
    """Remove ``method`` from the registry (a test's or a plugin's cleanup)."""
    if method not in _REGISTRY:
        raise ProcessorError(f"method: {method!r} is not registered")
    del _REGISTRY[method]


def registered_methods() -> tuple[str, ...]:
    """The registered method names, in registration order."""
    return tuple(_REGISTRY)


def processor_entry(method: str) -> ProcessorEntry[Any]:
    """The entry of ``method``; an unknown name raises :class:`ProcessorError` listing the known ones."""
    entry = _REGISTRY.get(method)
    if entry is None:
        known = ", ".join(repr(name) for name in _REGISTRY)
        raise ProcessorError(f"method: expected one of {known} or a processor object, found {method!r}")
    return entry


def _methods_for(spec: object) -> list[str]:
    """Registered methods whose spec type ``spec`` is (a hint for a wrong pairing)."""
    out = []
    for name, entry in _REGISTRY.items():
        if not isinstance(spec, entry.spec_type):
            continue
        if isinstance(spec, WeightOnlySpec) and name in FAMILIES and name != spec.family:
            continue  # a WeightOnlySpec runs as its own family (or "weight_only")
        out.append(name)
    return out


def make_processor(
    method: str,
    spec: object,
    terms: AsymmetricSpec | None = None,
    *,
    module_specs: dict[str, Any] | None = None,
) -> Processor:
    """The registered processor for ``method`` built from ``spec`` (and ``terms`` for GPTAQ/FOEM: alpha/beta,
    default the reference's; ``module_specs``: named modules' own specs, module docstring). A spec that is not
    the method's spec type is refused naming both."""
    entry = processor_entry(method)
    if not isinstance(spec, entry.spec_type):
        hint = _methods_for(spec)
        runs_as = f"; a {type(spec).__name__} runs as {' or '.join(repr(m) for m in hint)}" if hint else ""
        raise ProcessorError(
            f"method: {method!r} runs with a qalgos {entry.spec_type.__name__}, found {spec!r}{runs_as}"
        )
    return entry.build(spec, terms, module_specs)


def _asymmetric(method: str) -> tuple[Callable[..., Processor], Callable[..., Processor]]:
    defaults = gptaq_defaults if method == "gptaq" else foem_defaults

    def plain(spec: QuantSpec, module_specs: dict[str, QuantSpec] | None = None) -> Processor:
        return GPTAQProcessor(spec, defaults(), module_specs)

    def with_terms(
        spec: QuantSpec, terms: AsymmetricSpec, module_specs: dict[str, QuantSpec] | None = None
    ) -> Processor:
        if terms.method != method:
            raise ProcessorError(f"terms: method {method!r} got {terms.method!r} terms")
        return GPTAQProcessor(spec, terms, module_specs)

    return plain, with_terms


def _family(family: str) -> Callable[..., Processor]:
    def build(spec: WeightOnlySpec, module_specs: dict[str, WeightOnlySpec] | None = None) -> Processor:
        if spec.family != family:
            raise ProcessorError(f"method: a WeightOnlySpec({spec.family!r}) runs as {spec.family!r}, found {family!r}")
        return WeightOnlyProcessor(spec, module_specs=module_specs)

    return build


def _register_builtins() -> None:
    register_processor("gptq", QuantSpec, GPTQProcessor, per_module=True)
    for name in ("gptaq", "foem"):
        plain, with_terms = _asymmetric(name)
        register_processor(name, QuantSpec, plain, with_terms=with_terms, per_module=True)
    register_processor("qqq", QuantSpec, QQQProcessor)
    register_processor("awq", QuantSpec, AWQProcessor)
    register_processor("awq_gptq", QuantSpec, AWQGPTQProcessor, per_module=True)
    register_processor("rtn", QuantSpec, WeightOnlyProcessor, per_module=True)
    register_processor("paroquant", ParoSpec, ParoQuantProcessor)
    for family in FAMILIES:
        register_processor(family, WeightOnlySpec, _family(family), per_module=True)
    register_processor("weight_only", WeightOnlySpec, WeightOnlyProcessor, per_module=True)


_register_builtins()
