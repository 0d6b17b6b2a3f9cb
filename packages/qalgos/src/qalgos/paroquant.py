"""ParoQuant: learned pairwise rotations and channel scales before AWQ-style 4-bit quantization, per linear.

The layer stored (:class:`qformats.layouts.paroquant.ParoQuantWeight`) computes ``y = Q @ R(x * c)``: the
input channels scaled by ``c`` (``channel_scales [1, in]``), ``krot`` rounds of Givens rotations within each
group (:mod:`qalgos.paroquant_rotation`), then an asymmetric 4-bit group-quantized weight ``Q [out, in]``
(AWQ GEMM). :func:`optimize_paroquant` learns it from one linear's weight ``[out, in]`` and calibration inputs
``[rows, in]`` with the reference's (GPT-QModel 7.7.0) two-stage schedule:

1. rows: ``train_samples + validation_samples`` rows picked evenly from the inputs; the first
   ``train_samples`` train, the last ``validation_samples`` validate; targets are the float layer's outputs.
2. rotation stage (``rotation_epochs``): angles ``theta`` (start 0) and optimizer scales ``s`` (start 1,
   clamped to ``[1e-2, 1e2]`` with a straight-through clamp) minimise the smooth-L1 loss of
   ``R(x / s) @ fq(R(W * s)).T`` against the targets; ``fq`` is the affine min/max fake quantizer with
   straight-through rounding whose group parameters follow the weight.
3. finetune stage (``finetune_epochs``): the group scales and zero points become parameters (initialised from
   the rotated weight) and are trained with the weight itself; angles and scales stay fixed.

Each stage: AdamW (betas 0.9/0.95, eps 1e-10, weight decay 0.01), mini-batches of ``batch_size`` rows in
order, a per-step cosine learning rate from ``lr`` down to ``lr / 20``; after every epoch the validation loss
is measured and the best state of the stage is kept. Export: ``c = 1 / s`` and ``theta`` rounded to float16
(what the checkpoint stores), the weight rotated with those, codes chosen under the float32 group scales,
scales stored as float16 (``QuantSpec.scale_dtype="float16"``'s convention). ``dequantized`` is the stored
layer's dense equivalent (``ParoQuantWeight.dequantize()``), what a reloaded checkpoint computes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from qformats.layouts.paroquant import ParoQuantWeight
from qformats.logical import QuantizedWeight

from .errors import ShapeError, SpecError
from .paroquant_rotation import RoundIndex, apply_blocks, pair_schedule, rotate, rotation_blocks
from .paroquant_train import affine_params, clamp_ste, fake_quantize, run_stage


@dataclass(frozen=True)
class ParoSpec:
    """ParoQuant settings (the reference's ``krot`` and ``opt_*`` fields, without the prefix).

    lowbit's defaults differ from the reference's in the optimisation budget only (reference: 10 + 10 epochs
    over 2048 rows): ``rotation_epochs=2``, ``finetune_epochs=1``, ``train_samples=512`` keep a 135M model on
    two CPU cores in minutes. Raise them toward the reference's for quality when time allows.
    """

    bits: int = 4
    group_size: int = 128
    krot: int = 8
    rotation_epochs: int = 2
    finetune_epochs: int = 1
    train_samples: int = 512
    validation_samples: int = 64
    batch_size: int = 64
    rotation_lr: float = 0.05
    weight_lr: float = 1e-5
    quantizer_lr: float = 1e-6
    seed: int = 0
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-10
    scale_clamp: tuple[float, float] = (1e-2, 1e2)

    def __post_init__(self) -> None:
        if self.bits != 4:
            raise SpecError(f"bits: ParoQuant stores 4-bit AWQ codes, found {self.bits}")
        if self.group_size != -1 and (self.group_size < 2 or self.group_size % 2):
            raise SpecError(f"group_size: ParoQuant needs -1 or an even group size, found {self.group_size}")
        for name in ("krot", "train_samples", "validation_samples", "batch_size"):
            if int(getattr(self, name)) < 1:
                raise SpecError(f"{name}: expected a positive integer, found {getattr(self, name)!r}")
        for name in ("rotation_epochs", "finetune_epochs"):
            if int(getattr(self, name)) < 0:
                raise SpecError(f"{name}: expected a non-negative integer, found {getattr(self, name)!r}")
        for name in ("rotation_lr", "weight_lr", "quantizer_lr"):
            if not float(getattr(self, name)) > 0:
                raise SpecError(f"{name}: expected a positive learning rate, found {getattr(self, name)!r}")
        low, high = self.scale_clamp
        if not 0 < low < high:
            raise SpecError(f"scale_clamp: expected 0 < min < max, found {self.scale_clamp!r}")


@dataclass(frozen=True, eq=False)
class ParoResult:
    """One optimized linear. ``weight``: the stored layer; ``dequantized`` ``[out, in]``: its dense equivalent
    in the input weight's dtype; ``loss``: mean squared output error of the stored layer on the validation rows
    (``identity_loss`` in ``notes``: the same with the transform left at identity, i.e. plain quantization);
    ``nsamples``: input rows given; ``fallback``: why nothing was learned (no rows), or None."""

    weight: ParoQuantWeight
    dequantized: torch.Tensor
    loss: float
    nsamples: int
    damp: float | None = None
    fallback: str | None = None
    notes: dict[str, Any] = field(default_factory=dict)


class _Layer(torch.nn.Module):
    """The trainable layer of both stages (float32): ``R(x / s) @ fq(R(W * s)).T + b``."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, pairs: torch.Tensor, spec: ParoSpec, g: int):
        super().__init__()
        self.spec, self.group = spec, g
        self.index = RoundIndex.from_pairs(pairs, g)
        self.weight = torch.nn.Parameter(weight.clone())
        self.bias = None if bias is None else bias.clone()
        self.theta = torch.nn.Parameter(torch.zeros(pairs.shape[0], weight.shape[1] // 2))
        self.scales = torch.nn.Parameter(torch.ones(weight.shape[1]))
        self.q_scale: torch.nn.Parameter | None = None
        self.q_zero: torch.nn.Parameter | None = None

    def safe_scales(self) -> torch.Tensor:
        return clamp_ste(self.scales, *self.spec.scale_clamp)

    def rotated_weight(self) -> torch.Tensor:
        blocks = rotation_blocks(self.index, self.theta, self.group)
        return apply_blocks(self.weight * self.safe_scales(), blocks)

    def init_quantizer(self) -> list[torch.nn.Parameter]:
        """Group scales and zero points become parameters, initialised from the rotated weight."""
        with torch.no_grad():
            scale, zero = affine_params(self.rotated_weight(), self.spec.bits, self.group)
        self.q_scale, self.q_zero = torch.nn.Parameter(scale), torch.nn.Parameter(zero)
        return [self.q_scale, self.q_zero]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.safe_scales()
        params = None if self.q_scale is None or self.q_zero is None else (self.q_scale, self.q_zero)
        blocks = rotation_blocks(self.index, self.theta, self.group)
        wq = fake_quantize(apply_blocks(self.weight * s, blocks), self.spec.bits, self.group, params)
        y = apply_blocks(x / s, blocks) @ wq.T
        return y if self.bias is None else y + self.bias


def _export(
    weight: torch.Tensor,
    pairs: torch.Tensor,
    theta: torch.Tensor,
    scales: torch.Tensor,
    spec: ParoSpec,
    g: int,
    params: tuple[torch.Tensor, torch.Tensor] | None,
) -> ParoQuantWeight:
    """The stored layer: float16 ``theta`` and ``channel_scales = 1 / s``, the weight rotated with those values."""
    out_features, in_features = weight.shape
    channel = (1.0 / scales.clamp(*spec.scale_clamp)).to(torch.float16)
    theta16 = theta.to(torch.float16)
    with torch.no_grad():
        rotated = rotate(weight / channel.float(), RoundIndex.from_pairs(pairs, g), theta16.float())
        scale, zero_float = params if params is not None else affine_params(rotated, spec.bits, g)
        qmax = 2**spec.bits - 1
        scale = scale.clamp(1e-5, 1e5)
        zero = (-zero_float.round()).clamp(0, qmax)
        codes = (torch.round(rotated.reshape(-1, g) / scale) + zero).clamp(0, qmax)
    groups = in_features // g
    quantized = QuantizedWeight(
        codes=codes.reshape(out_features, in_features).to(torch.uint8).numpy(),
        scales=np.ascontiguousarray(scale.reshape(out_features, groups).T.numpy().astype(np.float16)),
        zeros=np.ascontiguousarray(zero.reshape(out_features, groups).T.to(torch.int32).numpy()),
        g_idx=(np.arange(in_features) // g).astype(np.int32),
        bits=spec.bits,
        group_size=spec.group_size,
        sym=False,
        meta={"algorithm": "paroquant"},
    )
    return ParoQuantWeight(quantized, pairs.numpy().copy(), theta16.numpy(), channel.reshape(1, -1).numpy())


def _sample_rows(x: torch.Tensor, count: int) -> torch.Tensor:
    """At most ``count`` rows of ``x`` picked evenly (first and last included), in order."""
    if x.shape[0] <= count:
        return x
    return x[torch.linspace(0, x.shape[0] - 1, count).round().to(torch.int64)]


def _output_mse(weight: torch.Tensor, dense: torch.Tensor, x: torch.Tensor) -> float:
    if x.shape[0] == 0:
        return float(((weight - dense) ** 2).mean())
    with torch.no_grad():
        return float(((x @ dense.T - x @ weight.T) ** 2).mean())


def optimize_paroquant(
    weight: torch.Tensor,
    x: torch.Tensor,
    spec: ParoSpec,
    *,
    bias: torch.Tensor | None = None,
    seed: int = 0,
    fallback: str | None = None,
) -> ParoResult:
    """Learn and quantize one linear (see the module docstring). ``weight [out, in]``, ``x [rows, in]``,
    ``bias [out]`` or None; ``seed`` picks the pair schedule. With no rows, or a ``fallback`` reason, nothing is
    learned: the identity transform and min/max quantization (the reason is recorded in ``fallback``)."""
    if weight.ndim != 2 or not weight.dtype.is_floating_point or not bool(torch.isfinite(weight).all()):
        found = f"{weight.dtype} {tuple(weight.shape)}"
        raise ShapeError(f"weight: expected a finite floating [out, in] tensor, found {found}")
    in_features = weight.shape[1]
    if x.ndim != 2 or x.shape[1] != in_features:
        raise ShapeError(f"x: expected [rows, {in_features}], found {tuple(x.shape)}")
    g = in_features if spec.group_size == -1 else spec.group_size
    if in_features % g:
        raise SpecError(f"group_size: ParoQuant rotates groups of {g}, which must divide in_features={in_features}")
    pairs = pair_schedule(in_features, g, spec.krot, seed)
    w32 = weight.detach().to(torch.float32)
    b32 = None if bias is None else bias.detach().to(torch.float32)
    rows = _sample_rows(x.detach().to(torch.float32), spec.train_samples + spec.validation_samples)
    if rows.shape[0] == 0 and fallback is None:
        fallback = "no calibration rows reached the module"
    layer = _Layer(w32, b32, pairs, spec, g)
    notes: dict[str, Any] = {}
    if fallback is None:
        with torch.no_grad():
            targets = F.linear(rows, w32, b32)
        n_train = min(rows.shape[0], spec.train_samples)
        n_val = min(spec.validation_samples, max(1, rows.shape[0] - n_train))
        data = (rows[:n_train], targets[:n_train], rows[-n_val:], targets[-n_val:])
        with torch.enable_grad():
            run_stage(layer, [([layer.scales], spec.rotation_lr), ([layer.theta], spec.rotation_lr)],
                       spec.rotation_epochs, data, spec)  # fmt: skip
            quantizer = layer.init_quantizer()
            train, val = run_stage(
                layer, [([layer.weight], spec.weight_lr), (quantizer, spec.quantizer_lr)],
                spec.finetune_epochs, data, spec,
            )  # fmt: skip
        notes = {"train_loss": train, "val_loss": val}
    params = None
    if layer.q_scale is not None and layer.q_zero is not None:
        params = (layer.q_scale.detach(), layer.q_zero.detach())
    stored = _export(layer.weight.detach(), pairs, layer.theta.detach(), layer.scales.detach(), spec, g, params)
    dense = torch.from_numpy(stored.dequantize())
    probe = rows[-spec.validation_samples :] if rows.shape[0] else rows
    if fallback is None:
        plain = _export(w32, pairs, torch.zeros_like(layer.theta), torch.ones(in_features), spec, g, None)
        notes["identity_loss"] = _output_mse(w32, torch.from_numpy(plain.dequantize()), probe)
    return ParoResult(
        weight=stored,
        dequantized=dense.to(dtype=weight.dtype, device=weight.device),
        loss=_output_mse(w32, dense, probe),
        nsamples=int(x.shape[0]),
        fallback=fallback,
        notes=notes,
    )
