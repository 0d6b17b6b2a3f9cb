"""Stored bits per weight of saved checkpoint directories: the quantized modules' packed tensors (codes, scales,
zeros, ``g_idx``) x 8 over their ``out * in`` -- the unit of a ``bits_budget`` (docs/algorithms.md, "Mixed precision
under a bits budget").

    python benchmarks/stored_bits_per_weight.py DIR [DIR ...]
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Any


def stored_bytes(checkpoint: Any, name: str) -> int:
    """Bytes tensor ``name`` takes in its file (from the header: a bfloat16 tensor is 2 bytes a value, though
    qformats reads it as float32)."""
    return int(checkpoint.files[checkpoint.weight_map[name]].tensors[name].nbytes)


def stored_bits_per_weight(directory: Path) -> tuple[float, dict[int, int]]:
    """``(stored bits per weight, modules per width)`` of one checkpoint directory (qformats' reader)."""
    from qformats.checkpoint import Checkpoint

    checkpoint = Checkpoint(directory)
    bits = weights = 0
    widths: Counter[int] = Counter()
    for entry in checkpoint.modules():
        bits += sum(8 * stored_bytes(checkpoint, name) for name in entry.tensors.values())
        weights += entry.meta.in_features * entry.meta.out_features
        widths[entry.meta.bits] += 1
    return bits / weights, dict(sorted(widths.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directories", nargs="+", type=Path)
    for directory in parser.parse_args().directories:
        value, widths = stored_bits_per_weight(directory)
        print(f"{directory}: {value:.4f} stored bits per weight; modules per width {widths}")


if __name__ == "__main__":
    main()
