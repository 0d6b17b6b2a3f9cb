"""``validate(tensors, config)``: every violation in a checkpoint's tensors before a reader trusts them.

``tensors`` maps full checkpoint keys (``model.layers.0.mlp.down_proj.qweight``) to numpy arrays.
Modules are found by their layout's marker tensor (``qweight`` unless the layout says otherwise);
each module is checked with the settings the config gives it (dynamic overrides included) by the
layout registered for the config's layout key (``QuantizeConfig.layout``). Findings carry the full tensor key.

Rule ids added here (the layouts add their own, e.g. ``GPTQ-SHAPE``):

* ``CONFIG-NO-LAYOUT``   no layout is registered for the config's layout key.
* ``CONFIG-EXCLUDED``    a module excluded by a negative dynamic rule holds quantized tensors.
* ``CONFIG-NO-MODULES``  no module of the layout was found at all.
* ``SHAPE-UNKNOWN``      the module's logical dims can be neither inferred nor were given.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .config.model import QuantizeConfig
from .errors import LayoutError, UnsupportedLayoutError
from .layouts.registry import LayoutMeta, get_layout, marker_tensor, meta_inference
from .violations import Violation


def module_tensors(tensors: Mapping[str, np.ndarray], marker: str = "qweight") -> dict[str, dict[str, np.ndarray]]:
    """Group checkpoint keys by module: ``{prefix: {local name: array}}`` for prefixes holding ``marker``."""
    prefixes = sorted(k[: -len(marker) - 1] for k in tensors if k.endswith("." + marker))
    if marker in tensors:
        prefixes.insert(0, "")
    grouped: dict[str, dict[str, np.ndarray]] = {}
    for prefix in prefixes:
        head = f"{prefix}." if prefix else ""
        grouped[prefix] = {
            k[len(head) :]: v for k, v in tensors.items() if k.startswith(head) and "." not in k[len(head) :]
        }
    return grouped


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
        layout = get_layout(key)
    except UnsupportedLayoutError as exc:
        return [Violation("CONFIG-NO-LAYOUT", "<config>", f"a registered layout for {key!r}", str(exc))]
    marker = marker_tensor(layout)
    modules = module_tensors(tensors, marker)
    if not modules:
        return [Violation("CONFIG-NO-MODULES", f"*.{marker}", f"at least one {key} module", "none")]
    found: list[Violation] = []
    for prefix, local in modules.items():
        spec = config.for_module(prefix)
        if spec is None:
            found.append(
                Violation(
                    "CONFIG-EXCLUDED", f"{prefix}.{marker}", "a dense module (negative dynamic rule)", "quantized"
                )
            )
            continue
        if shapes is not None and prefix in shapes:
            in_, out = shapes[prefix]
            meta = LayoutMeta(spec.bits, spec.group_size, int(in_), int(out), spec.sym, spec.pack_dtype)
        else:
            infer = meta_inference(layout)
            if infer is None:
                found.append(Violation("SHAPE-UNKNOWN", f"{prefix}.{marker}", "shapes for this module", "none given"))
                continue
            try:
                meta = infer(
                    local, bits=spec.bits, group_size=spec.group_size, sym=spec.sym, pack_dtype=spec.pack_dtype
                )
            except LayoutError as exc:
                found.append(Violation("SHAPE-UNKNOWN", f"{prefix}.{marker}", "inferable dims", str(exc)))
                continue
        found.extend(_qualify(prefix, layout.validate(local, meta)))
    return found
