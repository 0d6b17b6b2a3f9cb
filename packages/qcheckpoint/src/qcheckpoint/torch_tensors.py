"""torch tensors and devices ↔ blob tensors for the continuation codec (imported only when torch is in use).

Accepted tensors: exact ``torch.Tensor`` or ``torch.nn.Parameter``, strided layout, not quantized, on ``cpu`` or
``cuda:<index>``. Bytes are copied to CPU for storage; the recorded device, ``requires_grad`` and Parameter-ness
are restored, and the restored bytes, dtype, shape and placement are checked.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from .errors import ContinuationError
from .safetensors_blob import BlobTensor

_TO_SAFETENSORS: dict[torch.dtype, str] = {
    torch.bool: "BOOL",
    torch.uint8: "U8",
    torch.int8: "I8",
    torch.int16: "I16",
    torch.uint16: "U16",
    torch.int32: "I32",
    torch.uint32: "U32",
    torch.int64: "I64",
    torch.uint64: "U64",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.float32: "F32",
    torch.float64: "F64",
    torch.float8_e4m3fn: "F8_E4M3",
    torch.float8_e5m2: "F8_E5M2",
}
_FROM_SAFETENSORS = {v: k for k, v in _TO_SAFETENSORS.items()}
_DEVICE = re.compile(r"cpu|cuda(:[0-9]+)?")


def is_torch_tensor(value: object) -> bool:
    """True for any torch tensor (including subclasses, which :func:`torch_to_blob` then rejects)."""
    return isinstance(value, torch.Tensor)


def is_torch_device(value: object) -> bool:
    """True for a ``torch.device``."""
    return isinstance(value, torch.device)


def device_to_text(device: torch.device, path: str) -> str:
    """``cpu``, ``cuda`` or ``cuda:<n>``; other device types raise ContinuationError."""
    text = str(device)
    if _DEVICE.fullmatch(text) is None:
        raise ContinuationError(f"{path}: device {text!r} is not supported; expected cpu or cuda[:index]")
    return text


def device_from_text(text: object, path: str) -> torch.device:
    """Parse a recorded device string (validated before torch sees it)."""
    if not isinstance(text, str) or _DEVICE.fullmatch(text) is None:
        raise ContinuationError(f"{path}: expected a device 'cpu' or 'cuda[:index]', found {text!r:.80}")
    return torch.device(text)


def torch_to_blob(tensor: torch.Tensor, path: str) -> tuple[BlobTensor, dict[str, Any]]:
    """(blob tensor, node info) for ``tensor``; the info records device, requires_grad and Parameter-ness."""
    if type(tensor) not in (torch.Tensor, torch.nn.Parameter):
        raise ContinuationError(f"{path}: tensor subclass {type(tensor).__name__} is not supported")
    if tensor.layout != torch.strided or tensor.is_quantized:
        raise ContinuationError(f"{path}: only dense strided tensors are supported, found layout {tensor.layout}")
    device = device_to_text(tensor.device, path)
    if device == "cuda":
        device = f"cuda:{tensor.device.index or 0}"
    dtype = _TO_SAFETENSORS.get(tensor.dtype)
    if dtype is None:
        raise ContinuationError(f"{path}: torch dtype {tensor.dtype} is not supported")
    flat = tensor.detach().resolve_conj().resolve_neg().to("cpu").contiguous().reshape(-1)
    raw = flat.view(torch.uint8).numpy().data
    info = {"device": device, "requires_grad": bool(tensor.requires_grad)}
    if isinstance(tensor, torch.nn.Parameter):
        info["parameter"] = True
    return BlobTensor(dtype, tuple(int(d) for d in tensor.shape), raw), info


def torch_from_blob(tensor: BlobTensor, device_text: object, requires_grad: bool, parameter: bool, path: str) -> Any:
    """Restore a tensor to its recorded device and dtype, verifying bytes, shape and placement."""
    dtype = _FROM_SAFETENSORS.get(tensor.dtype)
    if dtype is None:
        raise ContinuationError(f"{path}: safetensors dtype {tensor.dtype} has no torch equivalent")
    device = device_from_text(device_text, path)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", 0)
    if device.type == "cuda" and (not torch.cuda.is_available() or (device.index or 0) >= torch.cuda.device_count()):
        raise ContinuationError(f"{path}: recorded on {device} but that CUDA device is not available here")
    stored = bytearray(tensor.data)
    if stored:
        flat = torch.frombuffer(stored, dtype=torch.uint8)
    else:
        flat = torch.empty(0, dtype=torch.uint8)
    cpu = flat.view(dtype).reshape(tensor.shape)
    restored = cpu.to(device, copy=device.type != "cpu")
    if restored.device != device or restored.dtype != dtype or tuple(restored.shape) != tensor.shape:
        raise ContinuationError(
            f"{path}: restored tensor is {restored.dtype} on {restored.device}, expected {dtype} on {device}"
        )
    if device.type != "cpu":
        back = restored.to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        if back != tensor.data.tobytes():
            raise ContinuationError(f"{path}: bytes restored on {device} differ from the stored bytes")
    if parameter:
        return torch.nn.Parameter(restored, requires_grad=requires_grad)
    return restored.requires_grad_(requires_grad) if requires_grad else restored
