"""Engine facts of a quantization run before it starts: the settings, the dense dtype and every linear it
will quantize (from the meta skeleton; no weight is read). ``qformats.engines`` judges them."""

from __future__ import annotations

import re
from typing import Any

from qformats.engines import CheckpointFacts, facts_from_settings
from torch import nn

from .save.dense_dtype import dtype_name, resolve_dense_dtype


def planned_linears(source: Any) -> list[tuple[str, int, int]]:
    """``(name, in_features, out_features)`` of every linear in the definition's calculation groups, every
    layer (``#`` expert wildcards expanded against the skeleton)."""
    out: list[tuple[str, int, int]] = []
    definition = source.definition
    for index in range(source.num_layers):
        prefix = source.layer_prefix(index)
        layer = source.model.get_submodule(prefix)
        named = dict(layer.named_modules())
        for group in definition.groups:
            for name in group.modules:
                pattern = re.compile(re.escape(name).replace("\\#", r"\d+") + r"\Z")
                for found, module in named.items():
                    if isinstance(module, nn.Linear) and pattern.match(found):
                        out.append((f"{prefix}.{found}", module.in_features, module.out_features))
    return out


def planned_facts(quant_model: Any, dtype: str = "auto") -> CheckpointFacts:
    """The :class:`~qformats.engines.CheckpointFacts` the run of ``quant_model`` (a ``QuantModel``) will write
    with dense ``dtype`` (see :func:`qhf.save.dense_dtype.resolve_dense_dtype`)."""
    config = quant_model.config
    return facts_from_settings(
        format=str(config.format),
        bits=config.width,
        group_size=config.group_size,
        sym=config.sym,
        desc_act=bool(config.desc_act),
        dtype=dtype_name(resolve_dense_dtype(quant_model.source, dtype)),
        modules=planned_linears(quant_model.source),
    )
