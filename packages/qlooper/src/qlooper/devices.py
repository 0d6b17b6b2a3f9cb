"""Where a run computes: the compute device and the layer forwards' dtype, resolved before any work.

``resolve_device(value, argument=)`` turns ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or a ``torch.device`` into a
``torch.device`` that exists on this machine, or raises :class:`DeviceError` naming the argument (a CLI
flag or a keyword), the value and the devices that are available. ``default_device()`` is ``cuda`` when
``torch.cuda.is_available()``, else ``cpu``. ``resolve_compute_dtype(value, argument=)`` accepts
``float32`` / ``bfloat16`` / ``float16`` (a name or a ``torch.dtype``).
"""

from __future__ import annotations

import torch

from .errors import QLooperError

#: compute dtypes of the layer forwards (statistics and solves stay float32 whatever is chosen)
COMPUTE_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


class DeviceError(QLooperError, ValueError):
    """A device or compute dtype that this machine or qlooper cannot use (names the argument, the value and
    what is available)."""


def available_devices() -> list[str]:
    """``["cpu", "cuda:0", ...]``: the devices a run may compute on here."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return ["cpu", *(f"cuda:{i}" for i in range(count))]


def default_device() -> torch.device:
    """``cuda`` (the current CUDA device) when CUDA is available, else ``cpu``."""
    return resolve_device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def resolve_device(value: str | torch.device | None, *, argument: str = "device") -> torch.device:
    """The ``torch.device`` for ``value`` (None: :func:`default_device`); raises :class:`DeviceError` for a
    malformed name, a device type qlooper does not run on, or a device this machine lacks."""
    if value is None:
        return default_device()
    available = ", ".join(available_devices())
    if isinstance(value, torch.device):
        device = value
    elif isinstance(value, str):
        try:
            device = torch.device(value)
        except RuntimeError:
            raise DeviceError(f"{argument}: {value!r} is not a device name (available here: {available})") from None
    else:
        raise DeviceError(f"{argument}: expected a device name or torch.device, found {type(value).__name__}")
    if device.type == "cpu":
        if device.index not in (None, 0):
            raise DeviceError(f"{argument}: {value!r} does not exist (available here: {available})")
        return torch.device("cpu")
    if device.type != "cuda":
        raise DeviceError(
            f"{argument}: {value!r} is a {device.type!r} device; qlooper runs on cpu or cuda (available here: "
            f"{available})"
        )
    if not torch.cuda.is_available():
        raise DeviceError(
            f"{argument}: {value!r} needs CUDA, and torch.cuda.is_available() is False here "
            f"(torch {torch.__version__}, built for CUDA: {torch.version.cuda or 'no'}; available here: {available})"
        )
    index = torch.cuda.current_device() if device.index is None else device.index
    if index >= torch.cuda.device_count():
        raise DeviceError(
            f"{argument}: {value!r} does not exist; {torch.cuda.device_count()} CUDA device(s) "
            f"(available here: {available})"
        )
    return torch.device("cuda", index)


def resolve_compute_dtype(value: str | torch.dtype | None, *, argument: str = "compute_dtype") -> torch.dtype:
    """The ``torch.dtype`` for ``value`` (None: float32); raises :class:`DeviceError` naming the choices."""
    if value is None:
        return torch.float32
    for name, dtype in COMPUTE_DTYPES.items():
        if value == name or value is dtype:
            return dtype
    choices = ", ".join(COMPUTE_DTYPES)
    raise DeviceError(f"{argument}: expected one of {choices}, found {value!r}")
