"""Backend selection: the chosen backend and, on request, every rejected candidate with its reasons.

AUTO walks the registered backends in declared priority order (descending, then name) and takes the
first whose declaration, runtime prerequisites and (when tensors are given) weight structure all fit. It
never benchmarks. An explicit backend that cannot serve is refused with its reasons, never replaced.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .capabilities import dtype_name
from .contract import KernelContract
from .device import Target, resolve_target, target_reasons
from .errors import BackendRefusedError, KernelInputError, UnsupportedContractError
from .registry import AUTO, get_backend, registered_backends


@dataclass(frozen=True)
class Candidate:
    """One backend considered by :func:`select`; ``reasons`` is empty for a feasible one."""

    name: str
    priority: int
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Selection:
    """The outcome of :func:`select`. ``rejected`` is filled when ``explain=True``."""

    backend: str
    contract: KernelContract
    target: Target
    dtype: torch.dtype
    rejected: tuple[Candidate, ...] = ()

    def explain(self) -> str:
        """A readable account: what was chosen for what, and why every rejected candidate was not."""
        lines = [
            f"selected {self.backend!r} for {self.contract.describe()} on {self.target.describe()}"
            f" with {dtype_name(self.dtype)} activations"
        ]
        lines += [f"  rejected {c.name!r} (priority {c.priority}): {'; '.join(c.reasons)}" for c in self.rejected]
        return "\n".join(lines)


def backend_reasons(
    name: str,
    contract: KernelContract,
    target: Target,
    dtype: torch.dtype,
    *,
    logical: object | None = None,
    explicit: bool = False,
) -> tuple[str, ...]:
    """Every reason backend ``name`` cannot serve (empty: feasible). Builds nothing.

    ``explicit=False`` (AUTO) also rejects priority-0 backends, which serve only when named.
    """
    cls = get_backend(name)
    reasons = cls.CAPS.reasons(contract, target, dtype)
    reasons += target_reasons(target)
    if not reasons:
        reasons += cls.runtime_reasons(contract, target)
    if not reasons and logical is not None:
        reasons += cls.weight_reasons(logical)
    if not explicit and cls.CAPS.priority <= 0 and not reasons:
        reasons.append("priority 0: explicit use only")
    return tuple(reasons)


def _check_shape(contract: KernelContract, shape: Sequence[int] | None) -> None:
    if shape is not None and (len(shape) == 0 or int(shape[-1]) != contract.in_features):
        raise KernelInputError(f"shape: expected activations [..., {contract.in_features}], found {tuple(shape)}")


def select(
    contract: KernelContract,
    device: str | torch.device | Target = "cpu",
    dtype: torch.dtype = torch.float32,
    shape: Sequence[int] | None = None,
    backend: str = AUTO,
    *,
    explain: bool = True,
    emulate: bool = False,
    logical: object | None = None,
) -> Selection:
    """Choose the backend for ``contract`` on ``device`` with activations of ``dtype`` and ``shape``.

    ``shape`` is the activation shape ``[..., in_features]`` (checked when given). ``emulate=True`` runs a
    GPU device kind on the CPU (see :mod:`qkernels.device`). ``logical`` (the unpacked weight) adds the
    tensor-dependent checks. Raises :class:`BackendRefusedError` for an explicit backend that cannot serve
    and :class:`UnsupportedContractError` (listing every backend's reasons) when AUTO finds nothing.
    """
    _check_shape(contract, shape)
    target = resolve_target(device, emulate=emulate)
    what = f"{contract.describe()} on {target.describe()} with {dtype_name(dtype)} activations"
    if backend != AUTO:
        cls = get_backend(backend)
        reasons = backend_reasons(cls.NAME, contract, target, dtype, logical=logical, explicit=True)
        if reasons:
            raise BackendRefusedError(cls.NAME, what, reasons)
        return Selection(cls.NAME, contract, target, dtype)
    rejected: list[Candidate] = []
    for name in registered_backends():
        reasons = backend_reasons(name, contract, target, dtype, logical=logical)
        if not reasons:
            return Selection(name, contract, target, dtype, tuple(rejected) if explain else ())
        rejected.append(Candidate(name, get_backend(name).CAPS.priority, reasons))
    raise UnsupportedContractError(what, {c.name: c.reasons for c in rejected})


def probe(
    contract: KernelContract,
    device: str | torch.device | Target = "cpu",
    dtype: torch.dtype = torch.float32,
    backend: str = AUTO,
    *,
    emulate: bool = False,
) -> dict[str, tuple[str, ...]]:
    """Feasibility without building anything: backend name -> reasons (empty tuple = can serve).

    With ``backend=AUTO`` every registered backend is answered (priority-0 backends report that they
    are explicit-only); otherwise only the named one, as an explicit request would see it.
    """
    target = resolve_target(device, emulate=emulate)
    if backend != AUTO:
        name = get_backend(backend).NAME
        return {name: backend_reasons(name, contract, target, dtype, explicit=True)}
    return {name: backend_reasons(name, contract, target, dtype) for name in registered_backends()}
