"""The logical ParoQuant weight: an AWQ-quantized ``QuantizedWeight`` plus its input transform.

Fields (``K = in``, ``N = out``): ``weight`` (the AWQ part, 4-bit codes/scales/zeros ``[N, K]``), and the
transform of :mod:`.rotation`: ``pairs`` integer ``[krot, K]`` (local pair indices), ``theta`` float
``[krot, K / 2]``, ``channel_scales`` float ``[1, K]``. The rotation groups are the quantization groups
(``group_size`` -1 meaning ``K``). Dtypes are kept as stored (the reference writes int16 / float16 / float16).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import LayoutError, TranscodeError
from ...logical import QuantizedWeight
from .rotation import fold_into_weight, identity_rotation, rotate_inputs, rotation_group_size

FLOAT_DTYPES = ("float16", "float32", "bfloat16")  # bfloat16 arrives here as float32 (see checkpoint/dtypes)
INDEX_DTYPES = ("int16", "int32", "int64")


@dataclass(frozen=True, eq=False)
class ParoQuantWeight:
    """An AWQ weight whose layer rotates its inputs first (see the module docstring)."""

    weight: QuantizedWeight
    pairs: np.ndarray
    theta: np.ndarray
    channel_scales: np.ndarray

    def __post_init__(self) -> None:
        k = self.weight.in_features
        g = rotation_group_size(self.weight.group_size, k)
        krot = int(self.pairs.shape[0]) if self.pairs.ndim == 2 else 0
        expected = {"pairs": (krot, k), "theta": (krot, k // 2), "channel_scales": (1, k)}
        for name, shape in expected.items():
            value: np.ndarray = getattr(self, name)
            allowed = INDEX_DTYPES if name == "pairs" else FLOAT_DTYPES
            if krot == 0 or value.shape != shape or str(value.dtype) not in allowed:
                raise LayoutError(
                    f"{name}: expected {' or '.join(allowed)} {shape} (krot >= 1), found {value.dtype} {value.shape}"
                )
        reason = pairs_reason(self.pairs, g)
        if reason is not None:
            raise LayoutError(f"pairs: {reason}")

    @property
    def krot(self) -> int:
        return int(self.pairs.shape[0])

    @property
    def rotation_group_size(self) -> int:
        return rotation_group_size(self.weight.group_size, self.weight.in_features)

    def is_identity(self) -> bool:
        """True when the transform is a no-op (every angle 0, every channel scale 1)."""
        return not bool(np.any(self.theta)) and bool(np.all(self.channel_scales == 1))

    def rotate_inputs(self, x: np.ndarray) -> np.ndarray:
        """The layer's input transform applied to activations ``[..., K]`` (in their dtype)."""
        return rotate_inputs(x, self.pairs, self.theta, self.channel_scales, self.rotation_group_size)

    def dequantize(self) -> np.ndarray:
        """The dense equivalent float32 ``[N, K]``: ``W_awq`` times the transform, composed in float64."""
        folded = fold_into_weight(
            self.weight.dequantize(), self.pairs, self.theta, self.channel_scales, self.rotation_group_size
        )
        return folded.astype(np.float32)

    def to_quantized_weight(self) -> QuantizedWeight:
        """The AWQ part alone, exactly the same layer only when the transform is the identity."""
        if not self.is_identity():
            raise TranscodeError(
                "ParoQuant -> QuantizedWeight: the layer rotates and scales its inputs (non-zero theta or channel "
                "scales other than 1); no scalar-code layout holds that"
            )
        return self.weight

    @classmethod
    def from_quantized_weight(cls, weight: QuantizedWeight, krot: int = 8) -> ParoQuantWeight:
        """``weight`` with the identity transform of ``krot`` rounds (the same layer, exactly)."""
        pairs, theta, scales = identity_rotation(weight.in_features, weight.group_size, krot)
        return cls(weight, pairs, theta, scales)


def pairs_reason(pairs: np.ndarray, group_size: int) -> str | None:
    """Why ``pairs [krot, K]`` is not a set of matchings per group and round (``None`` when it is)."""
    krot, k = pairs.shape
    local = pairs.astype(np.int64).reshape(krot, k // group_size, group_size // 2, 2)
    padding = (local[..., 0] == -1) & (local[..., 1] == -1)
    in_range = (local >= 0).all(-1) & (local < group_size).all(-1) & (local[..., 0] != local[..., 1])
    if not bool(np.all(padding | in_range)):
        return f"every pair must be two distinct local indices in [0, {group_size}) or (-1, -1) padding"
    used = np.where(padding[..., None], -1, local).reshape(krot, k // group_size, group_size)
    ordered = np.sort(used, axis=-1)
    repeated = (ordered[..., 1:] == ordered[..., :-1]) & (ordered[..., 1:] >= 0)
    if bool(np.any(repeated)):
        return "an index appears in two pairs of one group and round (each round must be a matching)"
    return None
