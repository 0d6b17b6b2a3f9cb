"""The stored-module hooks of the families a checkpoint lists as modules of their own (QQQ, ParoQuant, VPTQ,
EXL3): each family's :class:`~qformats.layouts.families.StoredModules` record (wired up in
:mod:`qformats.layouts.builtin_families`) is made of the ``*_meta``, ``check_*`` and ``load_*`` functions here.

* ``*_meta(stubs, spec, config, dims) -> LayoutMeta``: QQQ and ParoQuant dims from the tensor shapes (their
  ``infer_meta``), bits and group size from the module's spec (dynamic overrides included); ParoQuant's ``sym``
  is always false (its AWQ part stores explicit zero points whatever the config says); EXL3 dims and bits from
  ``trellis [in/16, out/16, 16*b]`` (the config's float bits-per-weight is a nominal average), group size -1;
  VPTQ: the index rows pad ``out`` and the groups pad ``in``, so ``in`` comes from ``perm [in]`` or a
  ``norm_dim 0`` ``weight_scale [in]`` and ``out`` from a ``norm_dim 1`` ``weight_scale [out]`` or ``indices``
  rows * ``vector_len``; dims the tensors leave open are :data:`UNKNOWN_DIMS` (both).
* ``check_*(tensors, spec, config, dims) -> [Violation]``: the family's rules for one module (``QQQ-*``,
  ``PARO-*``/``AWQ-GEMM-*``, ``VPTQ-*``, ``EXL3-*``); dims it cannot infer raise :class:`LayoutError`
  (reported as ``SHAPE-UNKNOWN``). VPTQ dims cannot be read from the tensors: pass ``shapes`` to
  ``qformats.validate``.
* ``load_*(tensors, meta, config) -> logical``: the module's logical object (``dequantize() -> float32 [out, in]``).

Nothing here imports :mod:`qformats.checkpoint` (the registry loads this module on first lookup).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .config.model import ModuleSpec, QuantizeConfig
from .errors import ConfigError, LayoutError
from .layouts import exl3, paroquant, qqq, vptq
from .layouts.registry import LayoutMeta
from .violations import Violation

UNKNOWN_DIMS = 0
Dims = tuple[int, int] | None
Tensors = Mapping[str, np.ndarray]


def _meta(
    spec: ModuleSpec,
    dims: tuple[int, int],
    *,
    bits: int | None = None,
    group_size: int | None = None,
    sym: bool | None = None,
) -> LayoutMeta:
    """The module's meta from its spec, with ``bits`` / ``group_size`` / ``sym`` replaced where given."""
    return LayoutMeta(
        spec.bits if bits is None else bits,
        spec.group_size if group_size is None else group_size,
        dims[0],
        dims[1],
        spec.sym if sym is None else sym,
        spec.pack_dtype,
    )


def qqq_meta(stubs: Tensors, spec: ModuleSpec, _: QuantizeConfig, dims: Dims) -> LayoutMeta:
    """A QQQ module's meta: dims from ``B`` / ``s_channel`` (unless given), bits and group size from its spec."""
    if dims is None:
        found = qqq.infer_meta(stubs, group_size=spec.group_size, bits=spec.bits)
        dims = found.in_features, found.out_features
    return _meta(spec, dims)


def paroquant_meta(stubs: Tensors, spec: ModuleSpec, _: QuantizeConfig, dims: Dims) -> LayoutMeta:
    """A ParoQuant module's meta; ``sym`` is false (its AWQ part always stores explicit zeros)."""
    if dims is None:
        found = paroquant.infer_meta(stubs, group_size=spec.group_size, bits=spec.bits, sym=spec.sym)
        dims = found.in_features, found.out_features
    return _meta(spec, dims, sym=False)


def exl3_meta(stubs: Tensors, spec: ModuleSpec, _: QuantizeConfig, dims: Dims) -> LayoutMeta:
    """An EXL3 module's meta: dims (unless given) and bits from ``trellis``, group size -1."""
    found = exl3_dims(stubs) if dims is None else dims
    return _meta(spec, found, bits=exl3.layout.bits_of(stubs), group_size=-1)


def _vptq_dims(config: QuantizeConfig, stubs: Tensors) -> tuple[int, int]:
    """VPTQ ``(in, out)`` pinned by the tensors (0 for a dim they leave open; see the module docstring)."""
    settings = {**config.settings, "group_size": config.group_size}
    norm_dim = int(settings.get("norm_dim", 0))
    vector_len = int((settings.get("vector_lens") or [-1, 8])[1])
    scale = stubs.get("weight_scale")
    in_features = out_features = UNKNOWN_DIMS
    if "perm" in stubs and np.ndim(stubs["perm"]) == 1:
        in_features = int(np.shape(stubs["perm"])[0])
    elif scale is not None and np.ndim(scale) == 1 and norm_dim == 0:
        in_features = int(np.shape(scale)[0])
    if scale is not None and np.ndim(scale) == 1 and norm_dim == 1:
        out_features = int(np.shape(scale)[0])
    elif "indices" in stubs and np.ndim(stubs["indices"]) == 3 and vector_len > 0:
        out_features = int(np.shape(stubs["indices"])[1]) * vector_len
    if UNKNOWN_DIMS in (in_features, out_features):
        return UNKNOWN_DIMS, UNKNOWN_DIMS
    return in_features, out_features


def vptq_meta(stubs: Tensors, spec: ModuleSpec, config: QuantizeConfig, dims: Dims) -> LayoutMeta:
    """A VPTQ module's meta: dims given, else pinned by ``perm`` / ``weight_scale`` / ``indices`` (0 when open)."""
    return _meta(spec, _vptq_dims(config, stubs) if dims is None else dims)


def load_qqq(tensors: Tensors, meta: LayoutMeta, _: QuantizeConfig) -> qqq.QQQWeight:
    """A QQQ module's logical weight."""
    return qqq.unpack_qqq(tensors, meta)


def load_paroquant(tensors: Tensors, meta: LayoutMeta, _: QuantizeConfig) -> paroquant.ParoQuantWeight:
    """A ParoQuant module's logical weight (rotations and its AWQ part)."""
    return paroquant.unpack_paroquant(tensors, meta)


def load_exl3(tensors: Tensors, meta: LayoutMeta, _: QuantizeConfig) -> exl3.EXL3Weight:
    """An EXL3 module's logical weight."""
    return exl3.unpack_exl3(tensors, meta.in_features, meta.out_features)


def load_vptq(tensors: Tensors, meta: LayoutMeta, config: QuantizeConfig) -> vptq.VPTQWeight:
    """A VPTQ module's logical weight (its codebook spec from the config and the module's dims)."""
    return vptq.unpack_vptq(tensors, vptq.spec_from_config(config, meta.in_features, meta.out_features))


def check_qqq(local: Tensors, spec: ModuleSpec, _: QuantizeConfig, dims: Dims) -> list[Violation]:
    """QQQ's rules for one module (dims from ``B`` / ``s_channel`` unless given)."""
    meta = qqq.infer_meta(local, group_size=spec.group_size, bits=spec.bits)
    if dims is not None:
        meta = type(meta)(spec.bits, spec.group_size, dims[0], dims[1])
    return qqq.validate_qqq(local, meta)


def check_paroquant(local: Tensors, spec: ModuleSpec, _: QuantizeConfig, dims: Dims) -> list[Violation]:
    """ParoQuant's rules (its rotation tensors and its AWQ GEMM part) for one module."""
    meta = paroquant.infer_meta(local, group_size=spec.group_size, bits=spec.bits, sym=spec.sym)
    if dims is not None:
        meta = type(meta)(spec.bits, spec.group_size, dims[0], dims[1], spec.sym)
    return paroquant.validate_paroquant(local, meta)


def check_vptq(local: Tensors, _: ModuleSpec, config: QuantizeConfig, dims: Dims) -> list[Violation]:
    """VPTQ's rules for one module; its dims must be given (``LayoutError`` otherwise)."""
    if dims is None:
        raise LayoutError("VPTQ: module dims are not recoverable from the tensors; pass shapes=")
    try:
        spec = vptq.spec_from_config(config, dims[0], dims[1])
    except ConfigError as exc:
        return [Violation("VPTQ-CONFIG", "<config>", "a valid VPTQ config", str(exc))]
    return vptq.validate_vptq(local, spec)


def exl3_dims(local: Tensors) -> tuple[int, int]:
    """``(in, out)`` of an EXL3 module from its ``trellis [in/16, out/16, 16*b]`` (raises naming the tensor)."""
    trellis = local.get("trellis")
    if trellis is None or np.ndim(trellis) != 3:
        found = "absent" if trellis is None else f"shape {tuple(np.shape(trellis))}"
        raise LayoutError(f"EXL3: 'trellis' must be 3-D [in/16, out/16, 16*b] to read the dims, found {found}")
    shape = np.shape(trellis)
    return int(shape[0]) * 16, int(shape[1]) * 16


def check_exl3(local: Tensors, _: ModuleSpec, __: QuantizeConfig, dims: Dims) -> list[Violation]:
    """EXL3's rules for one module (dims from ``trellis`` unless given)."""
    in_features, out_features = exl3_dims(local) if dims is None else dims
    return exl3.validate_exl3(local, in_features, out_features)
