"""ParoQuant's input transform: a channel scale, then ``krot`` rounds of Givens rotations per group.

Shapes (``K = in_features``, ``g`` = the rotation group size, ``-1`` meaning ``K``; ``g`` even, ``K % g == 0``):

* ``pairs``          integer ``[krot, K]``: per round, ``K / 2`` index pairs ``(i, j)`` stored consecutively,
  group by group, as **local** indices in ``[0, g)``; ``(-1, -1)`` is padding (no rotation).
* ``theta``          float ``[krot, K / 2]``: the angle of each pair (radians).
* ``channel_scales`` float ``[1, K]``: multiplies the input channels before the first round.

For an input row ``x`` (``[K]``): ``x <- x * channel_scales``, then for every round ``r`` in order and every
pair ``(i, j)`` of group ``q`` (absolute indices ``q*g + i``, ``q*g + j``) with angle ``t``:
``x_i' = cos(t) x_i + sin(t) x_j`` and ``x_j' = -sin(t) x_i + cos(t) x_j`` (all pairs of a round at once).
The layer computes ``y = W_awq @ R(x)``, so its dense equivalent is ``W_awq @ G_last ... G_first @ diag(s)``.
"""

from __future__ import annotations

import numpy as np

from ...errors import LayoutError


def rotation_group_size(group_size: int, in_features: int) -> int:
    """``group_size`` with ``-1`` read as ``in_features``; LayoutError unless even and dividing ``in_features``."""
    g = in_features if group_size == -1 else int(group_size)
    if g <= 0 or in_features % g or g % 2:
        raise LayoutError(
            f"group_size: ParoQuant rotates groups of an even size dividing in_features={in_features}; "
            f"found {group_size}"
        )
    return g


def identity_rotation(in_features: int, group_size: int, krot: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The no-op transform the reference starts from: ``(pairs int16, theta float16 0, channel_scales float16 1)``."""
    g = rotation_group_size(group_size, in_features)
    if krot <= 0:
        raise LayoutError(f"krot: expected a positive number of rotation rounds, found {krot}")
    pairs = np.tile(np.arange(g, dtype=np.int16), (krot, in_features // g))
    theta = np.zeros((krot, in_features // 2), np.float16)
    return pairs, theta, np.ones((1, in_features), np.float16)


def absolute_pairs(pairs: np.ndarray, group_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(i, j, valid)`` each ``[krot, K / 2]``: absolute channel indices of every pair and its padding mask."""
    krot, k = pairs.shape
    local = pairs.astype(np.int64).reshape(krot, k // group_size, group_size // 2, 2)
    offset = (np.arange(k // group_size, dtype=np.int64) * group_size)[None, :, None]
    valid = (local[..., 0] >= 0) & (local[..., 1] >= 0)
    i = np.where(valid, local[..., 0] + offset, 0).reshape(krot, k // 2)
    j = np.where(valid, local[..., 1] + offset, 0).reshape(krot, k // 2)
    return i, j, valid.reshape(krot, k // 2)


def rotate_inputs(
    x: np.ndarray, pairs: np.ndarray, theta: np.ndarray, channel_scales: np.ndarray, group_size: int
) -> np.ndarray:
    """``R(x)`` for activations ``[..., K]`` in ``x``'s dtype: angles' cos/sin in float32, cast to that dtype,
    one rounding per operation (the reference's CPU arithmetic)."""
    k = x.shape[-1]
    g = rotation_group_size(group_size, k)
    out = (x.reshape(-1, k) * channel_scales.reshape(1, k).astype(x.dtype)).astype(x.dtype)
    i, j, valid = absolute_pairs(pairs, g)
    angles = theta.astype(np.float32)
    for r in range(pairs.shape[0]):
        ii, jj = i[r][valid[r]], j[r][valid[r]]
        cos = np.cos(angles[r][valid[r]]).astype(x.dtype)
        sin = np.sin(angles[r][valid[r]]).astype(x.dtype)
        xi, xj = out[:, ii], out[:, jj]
        out = out.copy()
        out[:, ii] = xi * cos + xj * sin
        out[:, jj] = -xi * sin + xj * cos
    result: np.ndarray = out.reshape(x.shape)
    return result


def fold_into_weight(
    weight: np.ndarray, pairs: np.ndarray, theta: np.ndarray, channel_scales: np.ndarray, group_size: int
) -> np.ndarray:
    """``weight [N, K] @ G_last ... G_first @ diag(channel_scales)`` in float64 (``y = result @ x``)."""
    k = weight.shape[1]
    g = rotation_group_size(group_size, k)
    out = weight.astype(np.float64)
    i, j, valid = absolute_pairs(pairs, g)
    angles = theta.astype(np.float64)
    for r in reversed(range(pairs.shape[0])):
        ii, jj = i[r][valid[r]], j[r][valid[r]]
        cos, sin = np.cos(angles[r][valid[r]]), np.sin(angles[r][valid[r]])
        wi, wj = out[:, ii], out[:, jj]
        out[:, ii] = cos * wi - sin * wj
        out[:, jj] = sin * wi + cos * wj
    result: np.ndarray = out * channel_scales.reshape(1, k).astype(np.float64)
    return result
