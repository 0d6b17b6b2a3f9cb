"""``validate(tensors, config)``: every violation in a checkpoint's tensors before a reader trusts them.

``tensors`` maps full checkpoint keys (``model.layers.0.mlp.down_proj.qweight``) to numpy arrays.
Modules are found by their layout's marker tensor (``qweight`` unless the layout says otherwise);
each module is checked with the settings the config gives it (dynamic overrides included) by the
layout registered for the config's layout key (``QuantizeConfig.layout``), or, for the families outside
the registry (``qqq``, ``paroquant``, ``vptq``, ``exl3``), by their weight family's check
(:attr:`qformats.layouts.families.StoredModules.check`).
Findings carry the full tensor key.

Rule ids added here (the layouts add their own, e.g. ``GPTQ-SHAPE``):

* ``CONFIG-NO-LAYOUT``   no layout is registered for the config's layout key.
* ``CONFIG-EXCLUDED``    a module excluded by a negative dynamic rule holds quantized tensors.
* ``CONFIG-NO-MODULES``  no module of the layout was found at all.
* ``SHAPE-UNKNOWN``      the module's logical dims can be neither inferred nor were given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from .config.model import ModuleSpec, QuantizeConfig
from .errors import LayoutError, UnsupportedLayoutError
from .layouts.families import get_family, stored_family_keys
from .layouts.registry import Layout, LayoutMeta, get_layout, marker_tensor, meta_inference
from .violations import Violation

Dims = tuple[int, int] | None
Check = Callable[[Mapping[str, np.ndarray], ModuleSpec, QuantizeConfig, Dims], list[Violation]]


@dataclass(frozen=True)
class _ModuleCheck:
    """How :func:`validate` finds and checks the modules of one layout or family."""

    marker: str
    dotted: tuple[str, ...]
    check: Check


def _module_check(key: str) -> _ModuleCheck:
    """The marker, dotted tensor names and check of layout or family ``key`` (raises for an unknown key)."""
    if key in stored_family_keys():
        family = get_family(key)
        if family.stored is None:  # stored_family_keys lists only families with one
            raise UnsupportedLayoutError(f"weight family {key!r} lists no stored modules")
        dotted = tuple(sorted(t for t in family.stored.tensors if "." in t))
        return _ModuleCheck(family.markers[0], dotted, family.stored.check)
    layout = get_layout(key)
    return _ModuleCheck(marker_tensor(layout), (), _registered_check(layout))


def module_tensors(
    tensors: Mapping[str, np.ndarray], marker: str = "qweight", dotted: tuple[str, ...] = ()
) -> dict[str, dict[str, np.ndarray]]:
    """Group checkpoint keys by module: ``{prefix: {local name: array}}`` for prefixes holding ``marker``.

    Local names hold no dot, except those listed in ``dotted`` (VPTQ's ``centroids.weight``)."""
    prefixes = sorted(k[: -len(marker) - 1] for k in tensors if k.endswith("." + marker))
    if marker in tensors:
        prefixes.insert(0, "")
    grouped: dict[str, dict[str, np.ndarray]] = {}
    for prefix in prefixes:
        head = f"{prefix}." if prefix else ""
        grouped[prefix] = {
            k[len(head) :]: v
            for k, v in tensors.items()
            if k.startswith(head) and ("." not in k[len(head) :] or k[len(head) :] in dotted)
        }
    return grouped


def _excluded(prefix: str, marker: str) -> Violation:
    """A module a negative dynamic rule keeps dense, yet holding quantized tensors."""
    return Violation("CONFIG-EXCLUDED", f"{prefix}.{marker}", "a dense module (negative dynamic rule)", "quantized")


def _qualify(prefix: str, found: list[Violation]) -> list[Violation]:
    if not prefix:
        return found
    return [Violation(v.rule, f"{prefix}.{v.tensor}", v.expected, v.found) for v in found]


def validate(
    tensors: Mapping[str, np.ndarray],
    config: QuantizeConfig,
    *,
    shapes: Mapping[str, tuple[int, int]] | None = None,
) -> list[Violation]:
    """Every violation of ``config``'s layout by ``tensors`` (empty list: the tensors can be trusted).

    ``shapes`` optionally gives ``{module prefix: (in_features, out_features)}``; otherwise each
    layout infers them from its tensors (GPTQ: ``g_idx`` and ``scales``).
    """
    key = config.layout
    try:
        family = _module_check(key)
    except UnsupportedLayoutError as exc:
        return [Violation("CONFIG-NO-LAYOUT", "<config>", f"a registered layout for {key!r}", str(exc))]
    modules = module_tensors(tensors, family.marker, family.dotted)
    if not modules:
        return [Violation("CONFIG-NO-MODULES", f"*.{family.marker}", f"at least one {key} module", "none")]
    found: list[Violation] = []
    for prefix, local in modules.items():
        spec = config.for_module(prefix)
        if spec is None:
            found.append(_excluded(prefix, family.marker))
            continue
        dims = None if shapes is None or prefix not in shapes else (int(shapes[prefix][0]), int(shapes[prefix][1]))
        try:
            found.extend(_qualify(prefix, family.check(local, spec, config, dims)))
        except LayoutError as exc:
            found.append(Violation("SHAPE-UNKNOWN", f"{prefix}.{family.marker}", "inferable dims", str(exc)))
    return found


def _registered_check(layout: Layout) -> Check:
    """The module check of a registered layout: dims from ``shapes`` or its ``infer_meta``, then ``validate``."""
    infer = meta_inference(layout)

    def check(
        local: Mapping[str, np.ndarray], spec: ModuleSpec, _: QuantizeConfig, dims: tuple[int, int] | None
    ) -> list[Violation]:
        if dims is not None:
            meta = LayoutMeta(spec.bits, spec.group_size, dims[0], dims[1], spec.sym, spec.pack_dtype)
        elif infer is None:
            raise LayoutError(f"{layout.key}: dims cannot be inferred from the tensors; pass shapes=")
        else:
            meta = infer(local, bits=spec.bits, group_size=spec.group_size, sym=spec.sym, pack_dtype=spec.pack_dtype)
        return layout.validate(local, meta)

    return check
