"""Which file tensors make which Hugging Face parameter, through an architecture record.

:func:`map_tensors` walks a file's tensor names (file order) and returns one :class:`MappedTensor` per
Hugging Face parameter (its llama.cpp sources and conversion) plus the tensors the record ignores. It refuses,
naming the tensors: a tensor no rule maps, a layer index outside ``[0, num_hidden_layers)``, a fused parameter
with a source missing, and layers that do not all hold the same parameters.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from .architecture import GGUFArchitecture, TensorRule
from .errors import GGUFFileError
from .tensor_conversions import Conversion

_BLOCK = re.compile(r"^blk\.(\d+)\.(.+)$")


@dataclass(frozen=True)
class MappedTensor:
    """Hugging Face parameter ``hf`` read from file tensors ``sources`` with ``conversion``."""

    hf: str
    sources: tuple[str, ...]
    conversion: Conversion


def _shown(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def map_tensors(
    arch: GGUFArchitecture, tensor_names: Iterable[str], num_layers: int, source: str
) -> tuple[dict[str, MappedTensor], list[str]]:
    """(Hugging Face name -> :class:`MappedTensor` in file order, ignored file tensors)."""
    names = list(tensor_names)
    present = set(names)
    global_rules = {g: rule for rule in arch.globals for g in rule.gguf}
    layer_rules = {g: rule for rule in arch.layer for g in rule.gguf}
    mapped: dict[str, MappedTensor] = {}
    ignored: list[str] = []
    unknown: list[str] = []
    layers: dict[int, set[str]] = {}
    for name in names:
        rule: TensorRule | None = global_rules.get(name)
        block = _BLOCK.match(name)
        if rule is not None:
            hf, sources = rule.hf, rule.gguf
        elif block and block.group(2) in layer_rules:
            index, rule = int(block.group(1)), layer_rules[block.group(2)]
            if index >= num_layers:
                raise GGUFFileError(f"{source}: tensor {name!r}: layer {index} is outside the file's "
                                    f"{num_layers} layers ({arch.gguf}.block_count)")  # fmt: skip
            hf, sources = f"{arch.layer_prefix}.{index}.{rule.hf}", tuple(f"blk.{index}.{g}" for g in rule.gguf)
            layers.setdefault(index, set()).add(rule.hf)
        elif name in arch.ignored or (block and block.group(2) in arch.ignored):
            ignored.append(name)
            continue
        else:
            unknown.append(name)
            continue
        absent = [s for s in sources if s not in present]
        if absent:
            raise GGUFFileError(
                f"{source}: {hf!r} is read from {', '.join(sources)}; the file lacks {', '.join(absent)}"
            )
        mapped.setdefault(hf, MappedTensor(hf, sources, rule.conversion))
    if unknown:
        raise GGUFFileError(
            f"{source}: {len(unknown)} tensor(s) have no Hugging Face parameter in the {arch.key} mapping: "
            f"{_shown(unknown)}"
        )
    _check_layers(layers, num_layers, arch, source)
    return mapped, ignored


def _check_layers(layers: dict[int, set[str]], num_layers: int, arch: GGUFArchitecture, source: str) -> None:
    """Every layer ``0 .. num_layers - 1`` holds the same parameters."""
    union = set().union(*layers.values()) if layers else set()
    for index in range(num_layers):
        lacking = sorted(union - layers.get(index, set()))
        if lacking:
            prefix = f"{arch.layer_prefix}.{index}."
            raise GGUFFileError(f"{source}: layer {index} lacks {len(lacking)} tensor(s) other layers hold: "
                                f"{_shown([prefix + n for n in lacking])}")  # fmt: skip
