"""ParoQuant's pair schedule and its differentiable Givens rotation (torch), for the optimizer in
:mod:`qalgos.paroquant`.

Shapes (``K = in_features``, ``g`` = the rotation group size, equal to the quantization group size; ``K % g == 0``,
``g`` even):

* ``pairs`` int16 ``[krot, K]``: per round ``r``, ``K / 2`` pairs ``(i, j)`` stored consecutively, group by group,
  as local indices in ``[0, g)`` (the stored layout of :mod:`qformats.layouts.paroquant.rotation`).
* ``theta`` ``[krot, K / 2]``: one angle (radians) per pair.

A round maps ``x_i -> cos(t) x_i + sin(t) x_j`` and ``x_j -> -sin(t) x_i + cos(t) x_j`` for all its pairs at once;
rounds apply in order. Here a round is computed as ``x * c + x[:, partner] * s`` with per-channel ``c``/``s``
gathered from the angles, so autograd reaches ``theta`` and ``x`` without in-place writes.

The schedule follows the reference's method: the ``g - 1`` perfect matchings of the circle (round-robin) method
over ``g`` channels; per group, ``krot`` distinct matchings drawn at random and the channel labels permuted at
random (one ``torch.Generator`` seeded per module). Every channel is paired in every round (pair ratio 0.5).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from .errors import SpecError


def round_robin_matchings(group_size: int) -> torch.Tensor:
    """int64 ``[g - 1, g / 2, 2]``: the circle method's perfect matchings of ``g`` channels (each pair once)."""
    if group_size < 2 or group_size % 2:
        raise SpecError(f"group_size: ParoQuant pairs channels within groups of an even size, found {group_size}")
    seats = list(range(group_size))
    rounds = []
    for _ in range(group_size - 1):
        rounds.append([(seats[k], seats[group_size - 1 - k]) for k in range(group_size // 2)])
        seats = [seats[0], seats[-1], *seats[1:-1]]  # keep seat 0, rotate the rest by one
    return torch.tensor(rounds, dtype=torch.int64)


def pair_schedule(in_features: int, group_size: int, krot: int, seed: int) -> torch.Tensor:
    """int16 ``[krot, K]`` local pairs: per group, ``krot`` distinct round-robin matchings, relabelled at random."""
    if in_features % group_size:
        raise SpecError(f"group_size: {group_size} must divide in_features={in_features} for ParoQuant's rotation")
    if not 1 <= krot <= group_size - 1:
        raise SpecError(f"krot: expected 1..{group_size - 1} rounds for rotation groups of {group_size}, found {krot}")
    template = round_robin_matchings(group_size)
    generator = torch.Generator().manual_seed(int(seed))
    pairs = torch.empty((krot, in_features), dtype=torch.int16)
    for group in range(in_features // group_size):
        chosen = template[torch.randperm(template.shape[0], generator=generator)[:krot]]
        labels = torch.randperm(group_size, generator=generator)
        start = group * group_size
        pairs[:, start : start + group_size] = labels[chosen].reshape(krot, group_size).to(torch.int16)
    return pairs


def module_seed(seed: int, layer: int, module: str) -> int:
    """A 63-bit seed per module from the run's ``seed``, the layer index and the module's full name."""
    digest = hashlib.sha256(f"paroquant:{int(seed)}:{int(layer)}:{module}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


@dataclass(frozen=True)
class RoundIndex:
    """Per round ``r``: ``partner [krot, K]`` (the other channel of each channel's pair), ``slot [krot, K]``
    (the pair index ``[0, K/2)`` of each channel) and ``sign [krot, K]`` (+1 for a pair's first channel, -1 for
    its second)."""

    partner: torch.Tensor
    slot: torch.Tensor
    sign: torch.Tensor

    @classmethod
    def from_pairs(cls, pairs: torch.Tensor, group_size: int) -> RoundIndex:
        krot, k = pairs.shape
        local = pairs.to(torch.int64).reshape(krot, k // group_size, group_size // 2, 2)
        offset = (torch.arange(k // group_size) * group_size).reshape(1, -1, 1)
        first = (local[..., 0] + offset).reshape(krot, k // 2)
        second = (local[..., 1] + offset).reshape(krot, k // 2)
        slots = torch.arange(k // 2).expand(krot, -1)
        partner = torch.empty((krot, k), dtype=torch.int64)
        slot = torch.empty((krot, k), dtype=torch.int64)
        sign = torch.empty((krot, k), dtype=torch.float32)
        for r in range(krot):
            partner[r, first[r]], partner[r, second[r]] = second[r], first[r]
            slot[r, first[r]], slot[r, second[r]] = slots[r], slots[r]
            sign[r, first[r]], sign[r, second[r]] = 1.0, -1.0
        return cls(partner, slot, sign)


def rotate(x: torch.Tensor, index: RoundIndex, theta: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """``x [rows, K]`` through every round in order (``inverse``: the transpose, rounds reversed); differentiable.

    Applied to a weight ``[out, K]`` it gives ``W R^T`` (each row rotated), so ``rotate(x) @ rotate(W).T == x @ W.T``.
    """
    rounds = range(theta.shape[0] - 1, -1, -1) if inverse else range(theta.shape[0])
    for r in rounds:
        angle = theta[r].to(x.dtype)[index.slot[r]]
        sin = torch.sin(angle) * index.sign[r].to(x.dtype)
        x = x * torch.cos(angle) + x[:, index.partner[r]] * (-sin if inverse else sin)
    return x


def rotation_blocks(index: RoundIndex, theta: torch.Tensor, group_size: int) -> torch.Tensor:
    """``[G, g, g]``: the transform as block-diagonal matrices, ``rotate(x) == apply_blocks(x, blocks)``
    (the rounds applied to ``g`` identity rows spanning every group; differentiable in ``theta``)."""
    k = index.partner.shape[1]
    groups = k // group_size
    eye = torch.eye(group_size, dtype=theta.dtype, device=theta.device).repeat(1, groups)  # [g, K]
    return rotate(eye, index, theta).reshape(group_size, groups, group_size).permute(1, 0, 2)


def apply_blocks(x: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
    """``x [rows, K]`` times the block-diagonal matrix ``blocks [G, g, g]`` (one batched matmul)."""
    groups, g, _ = blocks.shape
    grouped = x.reshape(x.shape[0], groups, g).transpose(0, 1)  # [G, rows, g]
    return torch.bmm(grouped, blocks).transpose(0, 1).reshape(x.shape[0], groups * g)
