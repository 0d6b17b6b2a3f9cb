"""Walking a checkpoint shard by shard, handing each quantized module over once all its tensors are read.

Memory stays bounded by one shard's quantized modules (plus modules whose tensors straddle into the next
shard, held until complete): tensors are memory-mapped one at a time. Dense tensors pass through as they
are; each complete module goes to a converter that yields the tensors to emit in its place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np

from .modules import ModuleEntry
from .reader import Checkpoint

ModuleConverter = Callable[[ModuleEntry, dict[str, np.ndarray]], Iterable[tuple[str, np.ndarray]]]


def stream_converted(checkpoint: Checkpoint, convert: ModuleConverter) -> Iterator[tuple[str, np.ndarray]]:
    """Yield ``(name, array)``: dense tensors unchanged, each module as ``convert(entry, tensors by suffix)``.

    Refuses (``CheckpointFormatError``) packed tensors in modules the config keeps dense before yielding.
    """
    checkpoint.dense_names()
    modules = {entry.prefix: entry for entry in checkpoint.modules()}
    owner = {name: entry.prefix for entry in modules.values() for name in entry.tensors.values()}
    local = {name: suffix for entry in modules.values() for suffix, name in entry.tensors.items()}
    pending: dict[str, dict[str, np.ndarray]] = {}
    for shard in sorted(set(checkpoint.weight_map.values())):
        handle = checkpoint.files[shard]
        for name in sorted(handle.tensors):
            prefix = owner.get(name)
            if prefix is None:
                yield name, handle.load(name)
                continue
            entry = modules[prefix]
            got = pending.setdefault(prefix, {})
            got[local[name]] = handle.load(name)
            if len(got) == len(entry.tensors):
                del pending[prefix]
                yield from convert(entry, got)
