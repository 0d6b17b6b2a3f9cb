"""The layout registry: layout key -> :class:`Layout`.

A layout converts between the logical :class:`~qformats.logical.QuantizedWeight` and the named
tensors of one checkpoint module. Every function is pure: named arrays in, named arrays out, inputs
never mutated. A duplicate registration is an error.

Built-in keys (see :data:`BUILTIN_KEYS`): ``gptq``, ``gptq_v2``, ``gptq_p`` (GPTQ); ``gemm``, ``gemv``,
``gemv_fast``, ``llm-awq`` (AWQ); ``marlin`` (GPTQ Marlin tiles), ``awq_marlin`` (AWQ Marlin tiles);
``gguf`` (GGUF blocks Q4_0/Q5_0/Q8_0); ``pack-quantized`` (compressed-tensors). Every key but
``awq_marlin`` and ``pack-quantized`` is a ``FORMAT`` value.

Besides the required members of :class:`Layout`, a layout may offer the optional members of
:class:`ShapedLayout` (``marker_tensor``, ``infer_meta``); read them through :func:`marker_tensor` and
:func:`meta_inference`, which supply the defaults.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..errors import DuplicateRegistrationError, UnsupportedLayoutError
from ..logical import QuantizedWeight
from ..violations import Violation
from .builtin_loader import BuiltinLoader


@dataclass(frozen=True)
class LayoutMeta:
    """What a reader needs besides the tensors to interpret a module's packed tensors.

    ``in_features``/``out_features`` are the logical (unpadded) dimensions; ``pack_dtype`` is the
    numpy dtype name of the packed words (``"int32"`` unless the layout says otherwise).
    """

    bits: int
    group_size: int
    in_features: int
    out_features: int
    sym: bool = True
    pack_dtype: str = "int32"


class Layout(Protocol):
    """The contract every registered layout fulfils."""

    key: str

    def pack(self, weight: QuantizedWeight, *, pack_dtype: str = "int32") -> dict[str, np.ndarray]:
        """Lay ``weight`` out as this layout's named tensors (``qweight``, ``qzeros``, ...)."""
        ...

    def unpack(self, tensors: Mapping[str, np.ndarray], meta: LayoutMeta) -> QuantizedWeight:
        """Recover the logical weight; raises LayoutError (after validate) on malformed input."""
        ...

    def validate(self, tensors: Mapping[str, np.ndarray], meta: LayoutMeta) -> list[Violation]:
        """Every violation of the layout's rules (empty when the tensors can be trusted)."""
        ...

    def cannot_represent(self, weight: QuantizedWeight) -> str | None:
        """``None`` when :meth:`pack` can hold ``weight`` losslessly, else the exact reason why not."""
        ...


class ShapedLayout(Layout, Protocol):
    """A layout with the optional members ``qformats.validate`` and checkpoint readers use when present."""

    marker_tensor: str
    """The tensor whose key identifies a module of this layout (:data:`DEFAULT_MARKER` when absent)."""

    def infer_meta(
        self,
        tensors: Mapping[str, np.ndarray],
        *,
        bits: int,
        group_size: int,
        sym: bool = True,
        pack_dtype: str = "int32",
    ) -> LayoutMeta:
        """Logical ``in``/``out`` (and the given settings) from the tensor shapes; LayoutError if unreadable."""
        ...


DEFAULT_MARKER = "qweight"


def marker_tensor(layout: Layout) -> str:
    """The layout's ``marker_tensor``, or :data:`DEFAULT_MARKER` when it declares none."""
    marker = getattr(layout, "marker_tensor", DEFAULT_MARKER)
    return marker if isinstance(marker, str) else DEFAULT_MARKER


def meta_inference(layout: Layout) -> Callable[..., LayoutMeta] | None:
    """The layout's bound ``infer_meta`` (signature of :meth:`ShapedLayout.infer_meta`), or ``None``."""
    infer: Callable[..., LayoutMeta] | None = getattr(layout, "infer_meta", None)
    return infer


_REGISTRY: dict[str, Layout] = {}

# Built-in layout families: each is a subpackage of ``qformats.layouts`` whose import registers its
# layouts. They are imported on first lookup, so ``import qformats`` stays cheap.
BUILTIN_FAMILIES: tuple[str, ...] = ("gptq", "awq", "marlin", "fp8", "bnb", "gguf", "compressed_tensors")
# Every key the built-in families register (docs/internals.md lists the same; a test holds them equal).
BUILTIN_KEYS: tuple[str, ...] = (
    "awq_marlin", "gemm", "gemv", "gemv_fast", "gguf", "gptq", "gptq_p", "gptq_v2", "llm-awq", "marlin",
    "pack-quantized",
)  # fmt: skip
_load_builtins = BuiltinLoader(__name__.rpartition(".")[0], BUILTIN_FAMILIES).ensure


def register_layout(layout: Layout) -> Layout:
    """Register ``layout`` under ``layout.key``; a second registration of a key raises."""
    key = str(layout.key)
    if key in _REGISTRY:
        raise DuplicateRegistrationError(f"layout {key!r} is already registered")
    _REGISTRY[key] = layout
    return layout


def get_layout(key: str) -> Layout:
    """The layout registered under ``key`` (a FORMAT value such as ``"gptq_v2"``)."""
    _load_builtins()
    try:
        return _REGISTRY[str(key)]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise UnsupportedLayoutError(f"no layout registered for format {key!r}; known: {known}") from None


def registered_layouts() -> tuple[str, ...]:
    """Keys of every registered layout, sorted."""
    _load_builtins()
    return tuple(sorted(_REGISTRY))
