"""``--device`` / ``--cache-device`` / ``--compute-dtype``: checked before any model is read.

A device this machine lacks (``cuda`` without CUDA, ``cuda:7`` with one GPU) or a name that is no device is a
``UsageError`` naming the flag, the value and the devices available here (qlooper's ``resolve_device``).
"""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import UsageError


def flag_device(value: str | None, flag: str) -> Any:
    """The ``torch.device`` of ``value`` (None: cuda when available, else cpu), or a ``UsageError``."""
    from qlooper.devices import DeviceError, resolve_device

    try:
        return resolve_device(value, argument=flag)
    except DeviceError as exc:
        raise UsageError(str(exc)) from None


def check_compute_flags(args: argparse.Namespace) -> None:
    """``quantize``: ``--device`` and ``--cache-device`` exist here; ``--compute-dtype`` other than float32 only
    for a method that takes it (``QuantMethod.takes_compute_dtype``: plain GPTQ, none of its variants' flags) and
    without ``--ray`` (the executor runs float32)."""
    flag_device(args.device, "--device")
    flag_device(args.cache_device, "--cache-device")
    if args.ray is not None and args.device is not None:
        raise UsageError(f"--device {args.device}: with --ray the layers run where the Ray workers are; drop --device")
    if args.compute_dtype == "float32":
        return
    extras = [flag for flag, given in (("--gptaq", args.gptaq), ("--foem", args.foem), ("--eora-rank", args.eora_rank),
                                       ("--awq-scales", args.awq_scales), ("--ray", args.ray)) if given]  # fmt: skip
    from qhf.methods import get_method, method_names

    from .quantize_flags import quant_method

    if extras or not quant_method(args.method).takes_compute_dtype:
        methods = [get_method(name) for name in method_names()]
        takers = " / ".join(f"--method {m.flag_name}" for m in methods if m.takes_compute_dtype)
        with_what = f"--method {args.method}" + "".join(f" {flag}" for flag in extras)
        raise UsageError(
            f"--compute-dtype {args.compute_dtype}: only plain {takers} runs its layer forwards in another "
            f"dtype, found {with_what} (leave --compute-dtype at float32)"
        )
