"""The built-in weight families (:mod:`qformats.layouts.families`); importing this module registers them.

Readers take one module's numpy tensors (no ``bias``) and a :class:`ModuleInput`; they raise
:class:`FamilyInputError` for a missing tensor or option and the family codec's ``LayoutError`` for
malformed tensors. Registration order is :data:`~qformats.layouts.families.BUILTIN_FAMILY_KEYS`.

Each record is the whole family: its codec (``pack`` / ``read`` / ``shape``), the tensor names of one
stored module, and the hooks the rest of qformats calls through the registry: ``stored``
(:mod:`qformats.stored_families`: dims, checks and reading of QQQ / ParoQuant / VPTQ / EXL3 checkpoint
modules), ``summary`` (:mod:`qformats.weight_only_summaries`: FP8 / bitsandbytes / GGUF directory
modules), ``scalar`` (:mod:`qformats.family_transcode`: QQQ and ParoQuant as exact scalar weights) and
``quantize`` / ``option_problem`` (the weight-only reference quantizers qalgos runs).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from .. import family_options as config_options
from .. import family_shapes as shapes
from .. import family_transcode as bridges
from .. import stored_families as stored
from .. import weight_only_summaries as summaries
from ..logical import QuantizedWeight
from .bnb import BnB4Weight, BnB8Weight, pack_bnb4, pack_bnb8, unpack_bnb4, unpack_bnb8
from .exl3 import EXL3Weight, pack_exl3, unpack_exl3
from .families import (
    FamilyInputError,
    FamilyRead,
    ModuleInput,
    ScalarBridge,
    StoredModules,
    WeightFamily,
    register_family,
)
from .fp8 import FP8Weight, pack_fp8, unpack_fp8
from .gguf import GGUFWeight, encodable_types
from .paroquant import ParoQuantWeight, pack_paroquant, unpack_paroquant
from .paroquant import infer_meta as paroquant_meta
from .qqq import QQQWeight, pack_qqq, unpack_qqq
from .qqq import infer_meta as qqq_meta
from .vptq import VPTQWeight, pack_vptq, spec_from_config, unpack_vptq
from .vptq.layout import OPTIONAL as VPTQ_OPTIONAL

Tensors = Mapping[str, np.ndarray]


def _codes_shape(weight: Any) -> tuple[int, int]:
    out_features, in_features = (int(d) for d in weight.codes.shape)
    return out_features, in_features


def _read_fp8(tensors: Tensors, given: ModuleInput) -> FamilyRead:
    return FamilyRead(unpack_fp8(tensors, given.config, given.semantics), 8, -1)


def _bnb_weight(tensors: Tensors) -> np.ndarray:
    weight = tensors.get("weight")
    if weight is None:
        raise FamilyInputError("bitsandbytes: tensor 'weight' is missing")
    return weight


def _read_bnb4(tensors: Tensors, given: ModuleInput) -> FamilyRead:
    w4 = unpack_bnb4(tensors)
    return FamilyRead(w4, 4, int(w4.blocksize))


def _read_bnb8(tensors: Tensors, given: ModuleInput) -> FamilyRead:
    return FamilyRead(unpack_bnb8(tensors), 8, -1)


def _pack_gguf(weight: GGUFWeight) -> dict[str, np.ndarray]:
    """GGUF module tensors: the ``qweight`` row bytes (a copy)."""
    return {"qweight": weight.qweight.copy()}


def _read_gguf(tensors: Tensors, given: ModuleInput) -> FamilyRead:
    if given.qtype is None:
        raise FamilyInputError("gguf: pass qtype= (the ggml type is not recoverable from the block bytes)")
    if "qweight" not in tensors:
        raise FamilyInputError("gguf: tensor 'qweight' is missing")
    w = GGUFWeight(tensors["qweight"], given.qtype, given.in_features)
    digits = re.search(r"\d+", w.type.name)
    return FamilyRead(w, int(digits.group()) if digits else 8, int(w.type.block_size))


def _group_size(family: str, config: Mapping[str, Any]) -> int:
    group_size = config.get("group_size", -1)
    if isinstance(group_size, bool) or not isinstance(group_size, int):
        raise FamilyInputError(f"{family}: config group_size must be an integer, found {group_size!r}")
    return group_size


def _read_qqq(tensors: Tensors, given: ModuleInput) -> FamilyRead:
    qqq = unpack_qqq(tensors, qqq_meta(tensors, group_size=_group_size("qqq", given.config)))
    return FamilyRead(qqq, 4, qqq.group_size)


def _read_paroquant(tensors: Tensors, given: ModuleInput) -> FamilyRead:
    group_size = _group_size("paroquant", given.config)
    return FamilyRead(unpack_paroquant(tensors, paroquant_meta(tensors, group_size=group_size)), 4, group_size)


def _read_exl3(tensors: Tensors, given: ModuleInput) -> FamilyRead:
    exl3 = unpack_exl3(tensors, given.in_features, given.out_features)
    return FamilyRead(exl3, exl3.bits, -1)


def _read_vptq(tensors: Tensors, given: ModuleInput) -> FamilyRead:
    spec = spec_from_config(given.config, given.in_features, given.out_features)
    vptq = unpack_vptq(tensors, spec, compute_dtype=given.config.get("compute_dtype"))
    return FamilyRead(vptq, int(given.config.get("bits", 2)), spec.groups[1])


def _dims(weight: Any) -> tuple[int, int]:
    return int(weight.out_features), int(weight.in_features)


def _quantize_fp8(w: np.ndarray, options: Mapping[str, Any]) -> FP8Weight:
    given = options.get("block_size")
    block = given if isinstance(given, tuple) else None
    method = "block" if block is not None and options.get("scale_method", "row") == "row" else options["scale_method"]
    return FP8Weight.quantize(w, format=options["fp8_format"], method=method, block_size=block)


def _quantize_bnb4(w: np.ndarray, options: Mapping[str, Any]) -> BnB4Weight:
    given = options.get("block_size")
    size = given if isinstance(given, int) else 64
    return BnB4Weight.quantize(
        w,
        quant_type=options["quant_type"],
        blocksize=size,
        compress_statistics=options["compress_statistics"],
        dtype=options["source_dtype"],
    )


def _bnb4_problem(options: Mapping[str, Any]) -> str | None:
    found = options.get("quant_type")
    return None if found in ("fp4", "nf4") else f"quant_type: expected 'fp4' or 'nf4', found {found!r}"


def _quantize_gguf(w: np.ndarray, options: Mapping[str, Any]) -> GGUFWeight:
    return GGUFWeight.quantize(w, str(options["gguf_type"]).upper())


def _gguf_problem(options: Mapping[str, Any]) -> str | None:
    found = options.get("gguf_type")
    if found is None:
        return "gguf_type: required for the gguf family (e.g. 'Q4_0', 'Q4_K', 'Q8_0')"
    if str(found).upper() not in encodable_types():
        return f"gguf_type: expected one of {encodable_types()}, found {found!r}"
    return None


def _stored(tensors: Iterable[str], meta: Any, check: Any, load: Any) -> StoredModules:
    return StoredModules(frozenset(tensors), meta, check, load)


WEIGHT_ONLY = summaries.weight_only_member
# The fields the reference writes for a QQQ / ParoQuant checkpoint (``wbits``: the name vLLM's QQQ loader reads;
# ParoQuant's AWQ part always stores explicit zeros, so like the reference it writes ``zero_point: false``, no ``sym``).
QQQ_FIELDS = {"wbits": 4, "sym": True}
PAROQUANT_FIELDS = {"krot": bridges.PAROQUANT_KROT, "zero_point": False}
BNB_ZEROS = "bitsandbytes codes index a value table scaled per block (int8: per row); no zero point"


def _bnb4_shape(weight: BnB4Weight) -> tuple[int, int]:
    return int(weight.shape[0]), int(weight.shape[1])


def _bnb8_shape(weight: BnB8Weight) -> tuple[int, int]:
    return int(weight.weight.shape[0]), int(weight.weight.shape[1])


def _quantize_bnb8(w: np.ndarray, options: Mapping[str, Any]) -> BnB8Weight:
    return BnB8Weight.quantize(w)


def _vptq_shape(weight: VPTQWeight) -> tuple[int, int]:
    return int(weight.spec.out_features), int(weight.spec.in_features)


register_family(WeightFamily("integer", "", (), (), QuantizedWeight, "integer", False, None, None, _dims))
register_family(
    WeightFamily(
        "fp8", "fp8", (), ("weight_scale_inv",), FP8Weight, "fp8", True, pack_fp8, _read_fp8, _codes_shape,
        zeros="FP8 values times a scale (no zero point)",
        member=WEIGHT_ONLY,
        summary=summaries.summarize_fp8,
        quantize=_quantize_fp8,
        read_options=config_options.fp8_read_options,
        quantize_options=config_options.fp8_quantize_options,
        config_fields=config_options.fp8_config_fields,
        shape_problem=shapes.fp8_shape_problem,
    )
)  # fmt: skip
register_family(
    WeightFamily(
        "bnb4", "bitsandbytes", (), ("weight_quant_map",), BnB4Weight, "bnb4", True, pack_bnb4, _read_bnb4, _bnb4_shape,
        accepts=lambda t: _bnb_weight(t).dtype != np.int8,
        zeros=BNB_ZEROS,
        member=WEIGHT_ONLY,
        summary=summaries.summarize_bnb4,
        quantize=_quantize_bnb4,
        option_problem=_bnb4_problem,
        quantize_options=config_options.bnb4_quantize_options,
        config_fields=config_options.bnb_config_fields,
        stored_bits=(4,),
    )
)  # fmt: skip
register_family(
    WeightFamily(
        "int8", "bitsandbytes", ("int8",), ("weight_scb",), BnB8Weight, "bnb8", True, pack_bnb8, _read_bnb8,
        _bnb8_shape,
        accepts=lambda t: _bnb_weight(t).dtype == np.int8,
        zeros=BNB_ZEROS,
        member=WEIGHT_ONLY,
        summary=summaries.summarize_int8,
        quantize=_quantize_bnb8,
        quantize_options=config_options.no_options,
        config_fields=config_options.bnb_config_fields,
        stored_bits=(8,),
    )
)  # fmt: skip
register_family(
    WeightFamily(
        "gguf", "gguf", (), ("qweight",), GGUFWeight, "gguf_blocks", True, _pack_gguf, _read_gguf, _dims,
        zeros="GGUF blocks carry their own scales (and minima for Q4_K/Q5_K); no config zero point",
        member=WEIGHT_ONLY,
        summary=summaries.summarize_gguf,
        quantize=_quantize_gguf,
        option_problem=_gguf_problem,
        read_options=config_options.gguf_read_options,
        quantize_options=config_options.gguf_quantize_options,
        gguf_blocks=True,
    )
)  # fmt: skip
register_family(
    WeightFamily(
        "qqq", "qqq", (), ("B",), QQQWeight, "qqq", False, pack_qqq, _read_qqq, _codes_shape,
        zeros="QQQ codes are symmetric around the fixed zero 8 (no stored zeros)",
        stored=_stored(("B", "s_channel", "s_group"), stored.qqq_meta, stored.check_qqq, stored.load_qqq),
        scalar=ScalarBridge(bridges.qqq_to_scalar, bridges.qqq_from_scalar, QQQ_FIELDS),
        read_options=config_options.qqq_read_options,
        shape_problem=shapes.qqq_shape_problem,
    )
)  # fmt: skip
register_family(
    WeightFamily(
        "paroquant", "paroquant", (), ("qweight",), ParoQuantWeight, "paroquant", False, pack_paroquant,
        _read_paroquant, lambda w: _dims(w.weight),
        zeros="ParoQuant stores AWQ GEMM true zeros (AWQ-005) behind its input transform",
        stored=_stored(
            ("qweight", "qzeros", "scales", "pairs", "theta", "channel_scales"),
            stored.paroquant_meta, stored.check_paroquant, stored.load_paroquant,
        ),
        scalar=ScalarBridge(bridges.paroquant_to_scalar, bridges.paroquant_from_scalar, PAROQUANT_FIELDS),
        read_options=config_options.group_size_read_options,
        shape_problem=shapes.paroquant_shape_problem,
    )
)  # fmt: skip
register_family(
    WeightFamily(
        "vptq", "vptq", (), ("indices",), VPTQWeight, "vptq", False, pack_vptq, _read_vptq, _vptq_shape,
        zeros="VPTQ indices address codebooks (no zero point)",
        stored=_stored(
            ("centroids.weight", "indices", *VPTQ_OPTIONAL), stored.vptq_meta, stored.check_vptq, stored.load_vptq
        ),
        bfloat16_compute_tensor="centroids.weight",
    )
)  # fmt: skip
register_family(
    WeightFamily(
        "exl3", "exl3", (), ("trellis",), EXL3Weight, "exl3", False, pack_exl3, _read_exl3, _dims,
        zeros="EXL3 trellis symbols decode through a codebook (no zero point)",
        stored=_stored(
            ("trellis", "suh", "svh", "mcg", "mul1", "su", "sv"), stored.exl3_meta, stored.check_exl3, stored.load_exl3
        ),
    )
)  # fmt: skip
