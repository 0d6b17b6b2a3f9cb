"""ParoQuant's training pieces: the straight-through affine fake quantizer, AdamW, and one optimisation stage.

:class:`AdamW` is torch's AdamW update (decoupled weight decay, bias-corrected moments) written out, in float32,
one parameter at a time in a fixed order, so that a run is reproducible and nothing beyond plain tensor ops is
loaded (``torch.optim`` imports the compiler stack on first use, seconds on a loaded CPU).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F


class _RoundSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.round()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad


class _ClampSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, low: float, high: float) -> torch.Tensor:
        return x.clamp(low, high)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return grad, None, None


def round_ste(x: torch.Tensor) -> torch.Tensor:
    return _RoundSTE.apply(x)  # type: ignore[no-untyped-call,no-any-return]


def clamp_ste(x: torch.Tensor, low: float, high: float) -> torch.Tensor:
    return _ClampSTE.apply(x, low, high)  # type: ignore[no-untyped-call,no-any-return]


def affine_params(weight: torch.Tensor, bits: int, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Min/max group parameters of ``weight [out, in]``: ``(scale, zero_float)`` each ``[out * in / group, 1]``."""
    view = weight.reshape(-1, group)
    low, high = view.amin(1, keepdim=True), view.amax(1, keepdim=True)
    scale = (high - low).clamp(min=1e-5) / (2**bits - 1)
    return scale, low / scale


def fake_quantize(
    weight: torch.Tensor, bits: int, group: int, params: tuple[torch.Tensor, torch.Tensor] | None = None
) -> torch.Tensor:
    """``weight [out, in]`` through the affine quantizer with straight-through rounding and clamps."""
    scale, zero_float = params if params is not None else affine_params(weight, bits, group)
    qmax = 2**bits - 1
    scale = clamp_ste(scale, 1e-5, 1e5)
    zero = clamp_ste(-round_ste(zero_float), 0, qmax)
    codes = clamp_ste(round_ste(weight.reshape(-1, group) / scale) + zero, 0, qmax)
    return ((codes - zero) * scale).reshape_as(weight)


class AdamW:
    """AdamW over parameter groups ``[(params, lr)]`` (``lr`` per group, changed through :attr:`lrs`)."""

    def __init__(
        self, groups: list[tuple[list[torch.nn.Parameter], float]], betas: tuple[float, float], eps: float, decay: float
    ) -> None:
        self.groups = [list(params) for params, _ in groups]
        self.lrs = [float(lr) for _, lr in groups]
        self.betas, self.eps, self.decay, self.steps = betas, eps, decay, 0
        self.moments = [[(torch.zeros_like(p), torch.zeros_like(p)) for p in params] for params in self.groups]

    def step(self) -> None:
        """One update of every parameter that has a gradient."""
        self.steps += 1
        b1, b2 = self.betas
        correction1, correction2 = 1 - b1**self.steps, 1 - b2**self.steps
        with torch.no_grad():
            for params, lr, moments in zip(self.groups, self.lrs, self.moments, strict=True):
                for p, (m, v) in zip(params, moments, strict=True):
                    if p.grad is None:
                        continue
                    p.mul_(1 - lr * self.decay)
                    m.lerp_(p.grad, 1 - b1)
                    v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                    denom = (v / correction2).sqrt_().add_(self.eps)
                    p.addcdiv_(m, denom, value=-lr / correction1)
                    p.grad = None


def _evaluate(model: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, target: torch.Tensor) -> float:
    with torch.no_grad():
        return float(F.smooth_l1_loss(model(x), target))


def run_stage(
    model: torch.nn.Module,
    groups: list[tuple[list[torch.nn.Parameter], float]],
    epochs: int,
    data: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    spec: Any,
) -> tuple[float, float]:
    """One stage: ``groups`` ``[(params, lr)]`` trained ``epochs`` times over ``data = (x_train [rows, in],
    y_train [rows, out], x_val, y_val)`` in mini-batches of ``spec.batch_size`` rows (smooth-L1 loss, per-step cosine
    learning rate from ``lr`` to ``lr / 20``), the best validation state kept. Returns (the last epoch's mean train
    loss, the best validation loss); with 0 epochs, both losses of the model as it is."""
    x_train, y_train, x_val, y_val = data
    if epochs == 0:
        return _evaluate(model, x_train, y_train), _evaluate(model, x_val, y_val)
    active = {id(p) for params, _ in groups for p in params}
    for p in model.parameters():
        p.requires_grad_(id(p) in active)
    optimizer = AdamW(groups, spec.betas, spec.eps, spec.weight_decay)
    base = list(optimizer.lrs)
    total = epochs * math.ceil(x_train.shape[0] / spec.batch_size)
    best, best_state, train_loss = math.inf, [p.detach().clone() for p in model.parameters()], 0.0
    for _ in range(epochs):
        losses = []
        for start in range(0, x_train.shape[0], spec.batch_size):
            stop = start + spec.batch_size
            loss = F.smooth_l1_loss(model(x_train[start:stop]), y_train[start:stop])
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            cosine = 0.5 * (1.0 + math.cos(math.pi * optimizer.steps / total))
            optimizer.lrs = [lr / 20 + (lr - lr / 20) * cosine for lr in base]
            losses.append(float(loss.detach()))
        train_loss = sum(losses) / len(losses)
        val = _evaluate(model, x_val, y_val)
        if val < best:
            best, best_state = val, [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():
        for p, saved in zip(model.parameters(), best_state, strict=True):
            p.copy_(saved)
    for p in model.parameters():
        p.requires_grad_(False)
    return train_loss, best
