"""The ggml tensor types qformats knows: numeric id, block size (elements) and type size (bytes).

Ids follow ggml's ``enum ggml_type`` (the values a native .gguf file stores in its tensor infos).
``Q1_0`` is ggml type 41 (128-element blocks: fp16 scale + 128 sign bits), the format that Prism
published as ``Q1_0_g128``; both names resolve to the same type. ``Q2_0`` is ggml type 42 (64-element
blocks: fp16 scale + 64 two-bit codes).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import UnsupportedLayoutError


@dataclass(frozen=True)
class GGMLType:
    """One ggml tensor type: ``block_size`` elements are stored in ``type_size`` bytes."""

    name: str
    type_id: int
    block_size: int
    type_size: int

    def row_bytes(self, elements: int) -> int:
        """Bytes of one row of ``elements`` values (``elements`` must be a multiple of the block)."""
        return elements // self.block_size * self.type_size

    def padded(self, elements: int) -> int:
        """``elements`` rounded up to a whole number of blocks."""
        return -(-elements // self.block_size) * self.block_size


_TYPES: tuple[GGMLType, ...] = (
    GGMLType("F32", 0, 1, 4),
    GGMLType("F16", 1, 1, 2),
    GGMLType("Q4_0", 2, 32, 18),
    GGMLType("Q4_1", 3, 32, 20),
    GGMLType("Q5_0", 6, 32, 22),
    GGMLType("Q5_1", 7, 32, 24),
    GGMLType("Q8_0", 8, 32, 34),
    GGMLType("Q2_K", 10, 256, 84),
    GGMLType("Q3_K", 11, 256, 110),
    GGMLType("Q4_K", 12, 256, 144),
    GGMLType("Q5_K", 13, 256, 176),
    GGMLType("Q6_K", 14, 256, 210),
    GGMLType("I8", 24, 1, 1),
    GGMLType("I16", 25, 1, 2),
    GGMLType("I32", 26, 1, 4),
    GGMLType("I64", 27, 1, 8),
    GGMLType("F64", 28, 1, 8),
    GGMLType("BF16", 30, 1, 2),
    GGMLType("Q1_0", 41, 128, 18),
    GGMLType("Q2_0", 42, 64, 18),
)

BY_NAME: dict[str, GGMLType] = {t.name: t for t in _TYPES}
BY_ID: dict[int, GGMLType] = {t.type_id: t for t in _TYPES}
ALIASES: dict[str, str] = {"Q1_0_G128": "Q1_0"}

# The quantized block types (everything that is not a plain element type).
BLOCK_TYPES: tuple[str, ...] = tuple(t.name for t in _TYPES if t.block_size > 1)


def ggml_type(name_or_id: str | int) -> GGMLType:
    """Resolve a type by name (case-insensitive, ``Q1_0_g128`` accepted) or by ggml id."""
    if isinstance(name_or_id, int):
        found = BY_ID.get(name_or_id)
        if found is None:
            known = ", ".join(f"{t.name}={t.type_id}" for t in _TYPES)
            raise UnsupportedLayoutError(f"ggml type id {name_or_id} is not supported; known: {known}")
        return found
    key = str(name_or_id).strip().upper()
    key = ALIASES.get(key, key)
    found = BY_NAME.get(key)
    if found is None:
        raise UnsupportedLayoutError(f"ggml type {name_or_id!r} is not supported; known: {', '.join(BY_NAME)}")
    return found
