"""Checkpoint-level checks for the layout families outside the registry: QQQ, ParoQuant, VPTQ, EXL3.

``qformats.validate`` uses :data:`FAMILIES` when a config's layout key names one of them. Each family
says which tensor marks one of its modules (``marker``, the weight-family registry's record in
:mod:`qformats.layouts.families`), which of its local tensor names hold a dot (VPTQ's
``centroids.weight``), and how to check one module's tensors under the module's settings.
A check returns the family's violations (``QQQ-*``, ``PARO-*``/``AWQ-GEMM-*``, ``VPTQ-*``, ``EXL3-*``); dims it
cannot infer raise :class:`LayoutError` (reported as ``SHAPE-UNKNOWN``). EXL3 dims come from the ``trellis``
shape ``[in/16, out/16, 16*b]`` (its bits from the same shape, whatever the config's bits-per-weight says).

VPTQ dims cannot be read from the tensors (the index rows pad ``out``, the groups pad ``in``): pass
``shapes`` to ``qformats.validate``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from .config.model import ModuleSpec, QuantizeConfig
from .errors import ConfigError, LayoutError
from .layouts import exl3, paroquant, qqq, vptq
from .layouts.families import get_family
from .violations import Violation

Dims = tuple[int, int] | None
Check = Callable[[Mapping[str, np.ndarray], ModuleSpec, QuantizeConfig, Dims], list[Violation]]


@dataclass(frozen=True)
class ModuleFamily:
    """How ``qformats.validate`` finds and checks the modules of one family (see the module docstring)."""

    marker: str
    dotted: tuple[str, ...]
    check: Check


def _qqq(local: Mapping[str, np.ndarray], spec: ModuleSpec, _: QuantizeConfig, dims: Dims) -> list[Violation]:
    meta = qqq.infer_meta(local, group_size=spec.group_size, bits=spec.bits)
    if dims is not None:
        meta = type(meta)(spec.bits, spec.group_size, dims[0], dims[1])
    return qqq.validate_qqq(local, meta)


def _paroquant(local: Mapping[str, np.ndarray], spec: ModuleSpec, _: QuantizeConfig, dims: Dims) -> list[Violation]:
    meta = paroquant.infer_meta(local, group_size=spec.group_size, bits=spec.bits, sym=spec.sym)
    if dims is not None:
        meta = type(meta)(spec.bits, spec.group_size, dims[0], dims[1], spec.sym)
    return paroquant.validate_paroquant(local, meta)


def _vptq(local: Mapping[str, np.ndarray], _: ModuleSpec, config: QuantizeConfig, dims: Dims) -> list[Violation]:
    if dims is None:
        raise LayoutError("VPTQ: module dims are not recoverable from the tensors; pass shapes=")
    try:
        spec = vptq.spec_from_config(config, dims[0], dims[1])
    except ConfigError as exc:
        return [Violation("VPTQ-CONFIG", "<config>", "a valid VPTQ config", str(exc))]
    return vptq.validate_vptq(local, spec)


def exl3_dims(local: Mapping[str, np.ndarray]) -> tuple[int, int]:
    """``(in, out)`` of an EXL3 module from its ``trellis [in/16, out/16, 16*b]`` (raises naming the tensor)."""
    trellis = local.get("trellis")
    if trellis is None or np.ndim(trellis) != 3:
        found = "absent" if trellis is None else f"shape {tuple(np.shape(trellis))}"
        raise LayoutError(f"EXL3: 'trellis' must be 3-D [in/16, out/16, 16*b] to read the dims, found {found}")
    shape = np.shape(trellis)
    return int(shape[0]) * 16, int(shape[1]) * 16


def _exl3(local: Mapping[str, np.ndarray], _: ModuleSpec, __: QuantizeConfig, dims: Dims) -> list[Violation]:
    in_features, out_features = exl3_dims(local) if dims is None else dims
    return exl3.validate_exl3(local, in_features, out_features)


def _entry(key: str, dotted: tuple[str, ...], check: Check) -> tuple[str, ModuleFamily]:
    """``key`` -> its checks, with the marker tensor of the weight-family registry's record."""
    return key, ModuleFamily(get_family(key).markers[0], dotted, check)


FAMILIES: dict[str, ModuleFamily] = dict(
    [
        _entry("qqq", (), _qqq),
        _entry("paroquant", (), _paroquant),
        _entry("vptq", ("centroids.weight", "res_centroids.weight", "outlier_centroids.weight"), _vptq),
        _entry("exl3", (), _exl3),
    ]
)
