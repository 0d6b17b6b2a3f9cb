"""Checkpoint modules of the families outside the layout registry: QQQ, ParoQuant, VPTQ and EXL3.

A module is a name prefix that owns the family's marker tensor (:data:`qformats.family_checks.FAMILIES`:
QQQ ``B``, ParoQuant ``qweight``, VPTQ ``indices``, EXL3 ``trellis``); its tensors are the prefix's
tensors with a local name in :data:`FAMILY_TENSORS` (VPTQ's dotted ``centroids.weight`` included).
Each becomes a :class:`~qformats.checkpoint.modules.ModuleEntry` whose ``layout`` is the family key and
whose ``meta`` carries the module's bits, group size and logical ``[out, in]`` dims:

* QQQ and ParoQuant: dims from the tensor shapes (their ``infer_meta``), bits and group size from the
  config (dynamic overrides included); ParoQuant's ``sym`` is always false (its AWQ part stores
  explicit zero points whatever the config says);
* EXL3: dims and bits from ``trellis [in/16, out/16, 16*b]`` (the config's float bits-per-weight is a
  nominal average), group size -1;
* VPTQ: the index rows pad ``out`` and the groups pad ``in``, so dims come from the ``shapes`` argument
  when given, else ``in`` from ``perm [in]`` or a ``norm_dim 0`` ``weight_scale [in]`` and ``out`` from a
  ``norm_dim 1`` ``weight_scale [out]`` or ``indices`` rows * ``vector_len``. A module without them (the
  reference's defaults: no permutation, no norm) has no dims (``in_features = out_features = 0``,
  :func:`dims_known` false): it cannot be checked or dequantized until ``shapes`` gives them
  (``qhf.load_quantized`` takes them from the model).

:func:`family_violations` checks one module with the same family checks as :func:`qformats.validate`;
:func:`family_dense` dequantizes one module to float32 ``[out, in]``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from ..config.model import QuantizeConfig
from ..errors import CheckpointFormatError, ConfigError, LayoutError
from ..family_checks import FAMILIES, exl3_dims
from ..layouts import exl3, paroquant, qqq, vptq
from ..layouts.registry import LayoutMeta
from ..violations import Violation
from .modules import ModuleEntry

FAMILY_TENSORS: dict[str, frozenset[str]] = {
    "qqq": frozenset({"B", "s_channel", "s_group"}),
    "paroquant": frozenset({"qweight", "qzeros", "scales", "pairs", "theta", "channel_scales"}),
    "vptq": frozenset({"centroids.weight", "indices", *vptq.layout.OPTIONAL}),
    "exl3": frozenset({"trellis", "suh", "svh", "mcg", "mul1", "su", "sv"}),
}
UNKNOWN_DIMS = 0
Shapes = Mapping[str, tuple[tuple[int, ...], str]]


def is_family(layout: str) -> bool:
    """True for the layout keys this module reads (``qqq``, ``paroquant``, ``vptq``, ``exl3``)."""
    return layout in FAMILY_TENSORS


def group_family_modules(layout: str, names: Iterable[str]) -> dict[str, dict[str, str]]:
    """Prefix -> {local name: full name} for every prefix owning the family's marker tensor."""
    names = list(names)
    marker = FAMILIES[layout].marker
    owners = sorted(n[: -len(marker) - 1] for n in names if n.endswith("." + marker))
    local_names = FAMILY_TENSORS[layout]
    modules: dict[str, dict[str, str]] = {p: {} for p in owners}
    for name in names:
        for prefix in owners:
            local = name[len(prefix) + 1 :]
            if name.startswith(prefix + ".") and local in local_names:
                modules[prefix][local] = name
    return modules


def _stubs(members: Mapping[str, str], shapes: Shapes) -> dict[str, np.ndarray]:
    """Zero-stride arrays with each member's shape and dtype (shape inference without loading data)."""
    return {local: np.broadcast_to(np.zeros((), dtype=shapes[n][1]), shapes[n][0]) for local, n in members.items()}


def _vptq_dims(config: QuantizeConfig, stubs: Mapping[str, np.ndarray]) -> tuple[int, int]:
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


def resolve_family_module(
    prefix: str,
    members: Mapping[str, str],
    shapes: Shapes,
    config: QuantizeConfig,
    layout: str,
    dims: tuple[int, int] | None = None,
) -> ModuleEntry | None:
    """The module's entry (``None`` when a negative dynamic rule keeps it dense); raises
    :class:`CheckpointFormatError` naming the module when its dims cannot be read from the shapes."""
    spec = config.for_module(prefix)
    if spec is None:
        return None
    stubs = _stubs(members, shapes)
    try:
        if dims is not None:
            in_features, out_features = dims
        elif layout == "qqq":
            meta = qqq.infer_meta(stubs, group_size=spec.group_size, bits=spec.bits)
            in_features, out_features = meta.in_features, meta.out_features
        elif layout == "paroquant":
            meta = paroquant.infer_meta(stubs, group_size=spec.group_size, bits=spec.bits, sym=spec.sym)
            in_features, out_features = meta.in_features, meta.out_features
        elif layout == "exl3":
            in_features, out_features = exl3_dims(stubs)
        else:
            in_features, out_features = _vptq_dims(config, stubs)
        bits = exl3.layout.bits_of(stubs) if layout == "exl3" else spec.bits
    except LayoutError as exc:
        raise CheckpointFormatError(f"module {prefix!r} ({layout}): {exc}") from None
    group_size = -1 if layout == "exl3" else spec.group_size
    sym = spec.sym and layout != "paroquant"  # ParoQuant's AWQ part always stores explicit zeros
    meta = LayoutMeta(bits, group_size, in_features, out_features, sym, spec.pack_dtype)
    return ModuleEntry(prefix, layout, meta, dict(members))


def dims_known(entry: ModuleEntry) -> bool:
    """False for a VPTQ module whose tensors do not pin its dims and no ``shapes`` gave them."""
    return UNKNOWN_DIMS not in (entry.meta.in_features, entry.meta.out_features)


def _dims(entry: ModuleEntry) -> tuple[int, int] | None:
    meta = entry.meta
    return None if UNKNOWN_DIMS in (meta.in_features, meta.out_features) else (meta.in_features, meta.out_features)


def family_violations(entry: ModuleEntry, tensors: Mapping[str, np.ndarray], config: QuantizeConfig) -> list[Violation]:
    """The family's violations for one module (local tensor names); ``SHAPE-UNKNOWN`` for unknown dims
    (callers that can go on without them check :func:`dims_known` first)."""
    spec = config.for_module(entry.prefix)
    if spec is None:
        return []
    dims = _dims(entry)
    family = FAMILIES[entry.layout]
    if dims is None:
        return [
            Violation(
                "SHAPE-UNKNOWN",
                family.marker,
                "dims pinned by perm / weight_scale, or passed as shapes=",
                "VPTQ in/out not recoverable from these tensors",
            )
        ]
    try:
        return family.check(tensors, spec, config, dims)
    except LayoutError as exc:
        return [Violation("SHAPE-UNKNOWN", family.marker, "inferable dims", str(exc))]


def family_weight(
    entry: ModuleEntry, tensors: Mapping[str, np.ndarray], config: QuantizeConfig
) -> qqq.QQQWeight | paroquant.ParoQuantWeight | vptq.VPTQWeight | exl3.EXL3Weight:
    """The module's family weight object (raises :class:`CheckpointFormatError` naming the module)."""
    dims = _dims(entry)
    try:
        if dims is None:
            raise LayoutError("VPTQ in/out are not recoverable from these tensors; pass shapes=")
        if entry.layout == "qqq":
            return qqq.unpack_qqq(tensors, entry.meta)
        if entry.layout == "paroquant":
            return paroquant.unpack_paroquant(tensors, entry.meta)
        if entry.layout == "exl3":
            return exl3.unpack_exl3(tensors, *dims)
        spec = vptq.spec_from_config(config, *dims)
        return vptq.unpack_vptq(tensors, spec)
    except (LayoutError, ConfigError) as exc:
        raise CheckpointFormatError(f"module {entry.prefix!r} ({entry.layout}): {exc}") from None


def family_dense(entry: ModuleEntry, tensors: Mapping[str, np.ndarray], config: QuantizeConfig) -> np.ndarray:
    """float32 ``[out, in]``: the module's dense equivalent weight (ParoQuant: its input transform folded in)."""
    return np.asarray(family_weight(entry, tensors, config).dequantize(), dtype=np.float32)
