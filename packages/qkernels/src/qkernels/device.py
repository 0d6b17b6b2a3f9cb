"""Where a module runs: a device kind, and whether a GPU kind is emulated on the CPU.

Emulation is the "reference preference" that lets CI without a GPU exercise the selection and dispatch of
GPU backends: a target ``cuda`` with ``emulated=True`` keeps tensors on the CPU and runs Triton kernels in
Triton's interpreter (``TRITON_INTERPRET=1``). Emulation is always explicit; it is never a fallback.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import KernelInputError

DEVICE_KINDS = ("cpu", "cuda")


@dataclass(frozen=True)
class Target:
    """A resolved execution target.

    ``kind`` is the device family the backends are asked about (``"cpu"`` or ``"cuda"``);
    ``torch_device`` is where tensors live (the CPU when ``emulated``).
    """

    kind: str
    torch_device: torch.device
    emulated: bool = False

    def describe(self) -> str:
        return f"{self.kind} (emulated on cpu)" if self.emulated else str(self.torch_device)


def resolve_target(device: str | torch.device | Target = "cpu", *, emulate: bool = False) -> Target:
    """Resolve ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:1"``, a ``torch.device`` or a Target).

    ``emulate=True`` with a GPU device gives a target whose tensors stay on the CPU.
    """
    if isinstance(device, Target):
        return device
    dev = torch.device(device)
    if dev.type not in DEVICE_KINDS:
        raise KernelInputError(f"device: expected one of {DEVICE_KINDS}, found {dev.type!r}")
    if emulate:
        if dev.type == "cpu":
            raise KernelInputError("emulate=True: only a GPU device kind can be emulated, found 'cpu'")
        return Target(kind=dev.type, torch_device=torch.device("cpu"), emulated=True)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0)
    return Target(kind=dev.type, torch_device=dev)


def target_reasons(target: Target) -> list[str]:
    """Why ``target`` itself cannot run anything (empty when it can)."""
    if target.kind == "cuda" and not target.emulated and not torch.cuda.is_available():
        return ["no CUDA device is available (torch.cuda.is_available() is False)"]
    return []
