"""The MLX affine quantized linear (mlx_lm's ``nn.QuantizedLinear``, ``mode="affine"``) and the exact bridge
from a logical :class:`~qformats.logical.QuantizedWeight`.

Tensors of one module (names as mlx_lm loads them, ``<module>.<name>``):

* ``weight`` uint32 ``[out, in*bits/32]``: codes packed along the input dimension, low bits first
  (:mod:`.words`).
* ``scales`` ``[out, in/group_size]`` and ``biases`` ``[out, in/group_size]``: one scale and one bias per
  contiguous run of ``group_size`` input columns, both in the model's float dtype (float16, bfloat16 or
  float32; numpy holds bfloat16 values as float32).

Dequantization is ``w[o, i] = scales[o, i // group_size] * q[o, i] + biases[o, i // group_size]``.
``group_size`` is 32, 64 or 128 and ``bits`` one of :data:`~.words.MLX_BITS`.

A GPTQ/AWQ weight ``s * (q - z)`` is the same affine map with ``biases = -s * z``: codes and scales carry over
bit exactly, and the bias is ``s * z`` (exact in float32: an 11-bit scale times a code of at most 8 bits)
rounded once to the scale dtype. So, per element, MLX's value differs from the logical one by at most the
unit roundoff of that dtype times ``|s * z|`` (float16 ``2**-11``, bfloat16 ``2**-8``, float32 ``2**-24``),
plus float32 rounding of the sum.

MLX has no group index: an MLX group must be a contiguous run whose columns all share one source group.
:func:`mlx_group_size` picks the largest run (128, 64, 32) for which that holds, so natural-order groups of
32/64/128, larger groups (256, per-channel ``-1``) and partial last groups are stored exactly (the scale
repeated over the runs of its group); act-order ``g_idx`` and groups smaller than 32 are refused with the
rule (:class:`~qformats.errors.TranscodeError`), never requantized here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ...checkpoint.dtypes import bf16_bits_to_float32, float32_to_bf16_bits
from ...errors import LayoutError, TranscodeError
from ...logical import QuantizedWeight
from .words import MLX_BITS, pack_words, unpack_words

#: Group sizes MLX's affine mode supports, largest first (the order :func:`mlx_group_size` tries them).
MLX_GROUP_SIZES: tuple[int, ...] = (128, 64, 32)
#: Scale / bias dtypes; ``bfloat16`` values are held as float32 arrays (numpy has no bfloat16).
SCALE_DTYPES: tuple[str, ...] = ("float16", "bfloat16", "float32")
#: Values per row block while packing (bounds the uint64 scratch lanes to a few MiB).
BLOCK_ELEMENTS = 1 << 20


def round_to(values: np.ndarray, dtype: str) -> np.ndarray:
    """float32 ``values`` rounded to ``dtype`` (nearest even); bfloat16 comes back as float32 holding bf16 values."""
    if dtype == "float16":
        return values.astype(np.float16)
    if dtype == "float32":
        return values.astype(np.float32)
    if dtype == "bfloat16":
        return bf16_bits_to_float32(float32_to_bf16_bits(values))
    raise LayoutError(f"scale dtype: expected one of {', '.join(SCALE_DTYPES)}, found {dtype!r}")


@dataclass(frozen=True, eq=False)
class MLXAffineWeight:
    """One MLX affine module's ``weight`` / ``scales`` / ``biases`` (see the module docstring for shapes)."""

    weight: np.ndarray
    scales: np.ndarray
    biases: np.ndarray
    bits: int
    group_size: int
    scale_dtype: str = "float16"

    def __post_init__(self) -> None:
        if self.bits not in MLX_BITS:
            raise LayoutError(f"bits: MLX affine stores {', '.join(map(str, MLX_BITS))}-bit codes, found {self.bits}")
        if self.group_size not in MLX_GROUP_SIZES:
            raise LayoutError(f"group_size: MLX affine groups are 32, 64 or 128 columns, found {self.group_size}")
        if self.scale_dtype not in SCALE_DTYPES:
            raise LayoutError(f"scale dtype: expected one of {', '.join(SCALE_DTYPES)}, found {self.scale_dtype!r}")
        if self.weight.dtype != np.uint32 or self.weight.ndim != 2 or (self.weight.shape[1] * 32) % self.bits:
            raise LayoutError(
                f"weight: expected uint32 [out, in*{self.bits}/32], found {self.weight.dtype} {self.weight.shape}"
            )
        if self.in_features % self.group_size:
            raise LayoutError(f"weight: in_features {self.in_features} is not a multiple of group {self.group_size}")
        expected = (self.out_features, self.in_features // self.group_size)
        held = np.float16 if self.scale_dtype == "float16" else np.float32
        for name, arr in (("scales", self.scales), ("biases", self.biases)):
            if arr.shape != expected or arr.dtype != held:
                raise LayoutError(
                    f"{name}: expected {np.dtype(held).name} {expected} for {self.scale_dtype} scales, "
                    f"found {arr.dtype} {arr.shape}"
                )

    @property
    def out_features(self) -> int:
        return int(self.weight.shape[0])

    @property
    def in_features(self) -> int:
        return int(self.weight.shape[1]) * 32 // self.bits

    def codes(self) -> np.ndarray:
        """uint8 codes ``[out, in]``."""
        return unpack_words(self.weight, self.bits, self.in_features)

    def tensors(self) -> dict[str, np.ndarray]:
        """``{"weight", "scales", "biases"}`` as mlx_lm names them under the module prefix."""
        return {"weight": self.weight, "scales": self.scales, "biases": self.biases}

    def dequantize(self) -> np.ndarray:
        """float32 ``[out, in]``: ``scales * q + biases`` evaluated in float32 (mlx rounds its result to the
        scale dtype)."""
        scales = np.repeat(self.scales.astype(np.float32), self.group_size, axis=1)
        biases = np.repeat(self.biases.astype(np.float32), self.group_size, axis=1)
        return scales * self.codes().astype(np.float32) + biases


def mlx_refusal(weight: QuantizedWeight) -> str | None:
    """Why ``weight`` has no exact MLX affine form (the rule it breaks), or None when it has one."""
    if weight.bits not in MLX_BITS:
        return f"{weight.bits}-bit codes: MLX affine stores {', '.join(map(str, MLX_BITS))}-bit codes"
    if _run_size(weight) is not None:
        return None
    in_ = weight.in_features
    if in_ % MLX_GROUP_SIZES[-1]:
        return f"in_features {in_} is not a multiple of 32 (MLX groups are contiguous runs of 32, 64 or 128 columns)"
    if not weight.has_default_g_idx():
        return (
            "act-order g_idx (desc_act): input columns of one contiguous run of 32 belong to different groups, "
            "and MLX groups are contiguous runs sharing one scale (MLX has no group index)"
        )
    return (
        f"group size {weight.group_size}: a contiguous run of 32 input columns spans several groups "
        "(MLX groups are 32, 64 or 128 columns sharing one scale)"
    )


def _run_size(weight: QuantizedWeight) -> int | None:
    for run in MLX_GROUP_SIZES:
        if weight.in_features % run == 0:
            runs = weight.g_idx.reshape(-1, run)
            if bool(np.all(runs == runs[:, :1])):
                return run
    return None


def mlx_group_size(weight: QuantizedWeight) -> int:
    """The largest MLX group size (128, 64, 32) whose contiguous runs each lie in one source group.

    Raises :class:`TranscodeError` with the rule (:func:`mlx_refusal`) when there is none.
    """
    why = mlx_refusal(weight)
    run = _run_size(weight)
    if why is not None or run is None:
        raise TranscodeError(why or "no MLX group size fits")
    return run


def _scale_dtype_of(scales: np.ndarray) -> str:
    return "float16" if scales.dtype == np.float16 else "float32"


def to_mlx(weight: QuantizedWeight, *, scale_dtype: str | None = None) -> MLXAffineWeight:
    """The exact MLX affine form of ``weight`` (codes and scales carried over, ``biases = -scales * zeros``).

    ``scale_dtype`` (default: the logical scales' own, float16 or float32; pass ``"bfloat16"`` for scales read
    from a BF16 tensor) is the dtype of ``scales`` and ``biases``. The packed words are unpacked again and
    compared with the codes before returning. Raises :class:`TranscodeError` naming the rule when MLX cannot
    hold the weight.
    """
    run = mlx_group_size(weight)
    dtype = scale_dtype or _scale_dtype_of(weight.scales)
    source_group = weight.g_idx[::run]  # [in/run]: the source group of each MLX run
    scales = round_to(weight.scales[source_group].T.astype(np.float32), dtype)
    biases = round_to(-(scales.astype(np.float32) * weight.zeros[source_group].T.astype(np.float32)), dtype)
    out_f, in_f = weight.codes.shape
    words = np.empty((out_f, in_f * weight.bits // 32), dtype=np.uint32)
    rows = max(1, BLOCK_ELEMENTS // max(1, in_f))
    for r0 in range(0, out_f, rows):
        block = weight.codes[r0 : r0 + rows]
        words[r0 : r0 + rows] = pack_words(block, weight.bits)
        if not np.array_equal(unpack_words(words[r0 : r0 + rows], weight.bits, in_f), block):
            raise TranscodeError(f"MLX words of rows {r0}..{r0 + len(block) - 1} do not unpack to the codes")
    return MLXAffineWeight(np.ascontiguousarray(words), np.ascontiguousarray(scales),
                           np.ascontiguousarray(biases), weight.bits, run, dtype)  # fmt: skip


def unpack_mlx(
    tensors: Mapping[str, np.ndarray], *, bits: int, group_size: int, scale_dtype: str | None = None
) -> MLXAffineWeight:
    """An :class:`MLXAffineWeight` from a module's ``weight`` / ``scales`` / ``biases`` (shapes and dtypes
    checked; raises :class:`LayoutError` naming the tensor)."""
    missing = [name for name in ("weight", "scales", "biases") if name not in tensors]
    if missing:
        raise LayoutError(f"MLX affine module: missing tensor(s) {', '.join(missing)}")
    dtype = scale_dtype or _scale_dtype_of(np.asarray(tensors["scales"]))
    return MLXAffineWeight(np.asarray(tensors["weight"]), np.asarray(tensors["scales"]),
                           np.asarray(tensors["biases"]), bits, group_size, dtype)  # fmt: skip
