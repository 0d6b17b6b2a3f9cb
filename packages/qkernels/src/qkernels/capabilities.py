"""What a backend declares it can serve, and the check of a contract against that declaration.

Every mismatch is reported (not just the first) so that an explanation lists all reasons at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .contract import KernelContract
from .device import Target

_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def dtype_name(dtype: torch.dtype) -> str:
    return _DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


def _names(values: object) -> str:
    items = sorted(values, key=str)  # type: ignore[call-overload]
    return "{" + ", ".join(str(v) for v in items) + "}"


@dataclass(frozen=True)
class Capabilities:
    """A backend's declared support.

    ``formats``/``group_sizes`` of ``None`` mean "any"; ``in_multiple``/``out_multiple`` are the shape
    alignment the kernel needs; ``group_divides_in`` asks ``in_features`` to be a whole number of groups;
    ``group_multiple`` is the granularity a group size must have (``-1`` always passes); ``priority``
    orders AUTO candidates (higher first; 0 = explicit use only); ``logical_kinds`` are the logical weight
    forms the kernel reads (``"integer"`` = ``QuantizedWeight``).
    """

    methods: frozenset[str]
    formats: frozenset[str] | None
    bits: frozenset[int]
    group_sizes: frozenset[int] | None
    sym: frozenset[bool]
    act_order: bool
    devices: frozenset[str]
    dtypes: frozenset[torch.dtype]
    pack_dtypes: frozenset[str] | None
    priority: int
    in_multiple: int = 1
    out_multiple: int = 1
    group_divides_in: bool = False
    group_multiple: int = 1
    logical_kinds: frozenset[str] = frozenset({"integer"})

    def reasons(self, contract: KernelContract, target: Target, dtype: torch.dtype) -> list[str]:
        """Every way ``contract`` on ``target`` with activations ``dtype`` falls outside this declaration."""
        out: list[str] = []
        c = contract
        if c.logical_kind not in self.logical_kinds:
            out.append(f"logical weight kind {c.logical_kind!r} not in {_names(self.logical_kinds)}")
        if c.method not in self.methods:
            out.append(f"method {c.method!r} not in {_names(self.methods)}")
        if self.formats is not None and c.format not in self.formats:
            out.append(f"format {c.format!r} not in {_names(self.formats)}")
        if c.bits not in self.bits:
            out.append(f"bits {c.bits} not in {_names(self.bits)}")
        if self.group_sizes is not None and c.group_size not in self.group_sizes:
            out.append(f"group_size {c.group_size} not in {_names(self.group_sizes)}")
        if c.sym not in self.sym:
            out.append("symmetric quantization not supported" if c.sym else "asymmetric zero points not supported")
        if c.act_order and not self.act_order:
            out.append("act-order (non-trivial g_idx) not supported")
        if target.kind not in self.devices:
            out.append(f"device {target.kind!r} not in {_names(self.devices)}")
        if dtype not in self.dtypes:
            out.append(f"activation dtype {dtype_name(dtype)} not in {_names(dtype_name(d) for d in self.dtypes)}")
        if self.pack_dtypes is not None and c.pack_dtype not in self.pack_dtypes:
            out.append(f"pack_dtype {c.pack_dtype} not in {_names(self.pack_dtypes)}")
        if c.in_features % self.in_multiple:
            out.append(f"in_features {c.in_features} not a multiple of {self.in_multiple}")
        if c.out_features % self.out_multiple:
            out.append(f"out_features {c.out_features} not a multiple of {self.out_multiple}")
        if self.group_multiple > 1 and c.group_size > 0 and c.group_size % self.group_multiple:
            out.append(f"group_size {c.group_size} not a multiple of {self.group_multiple}")
        if self.group_divides_in and c.group_size > 0 and c.in_features % c.group_size:
            out.append(f"in_features {c.in_features} not a whole number of groups of {c.group_size} (partial group)")
        return out
