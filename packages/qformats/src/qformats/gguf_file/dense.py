"""Read a llama .gguf as a dense float32 source: Hugging Face names, config, and tensors on demand.

:func:`read_llama_gguf` returns a :class:`DenseGGUF` whose ``config`` is a ``LlamaConfig``-style dict
and whose :meth:`~DenseGGUF.tensor` decodes one tensor at a time (so a caller can stream a model
without holding every layer in float32); :meth:`~DenseGGUF.state_dict` decodes all of them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from .errors import GGUFFileError
from .llama import hf_config, hf_name, unpermute_qk
from .reader import GGUFReader

log = logging.getLogger(__name__)


class DenseGGUF:
    """A llama .gguf viewed as named dense float32 tensors (numpy shapes, Hugging Face names)."""

    def __init__(self, reader: GGUFReader) -> None:
        self.reader = reader
        meta = {key: reader.value(key) for key in reader.metadata}
        self.config: dict[str, Any] = hf_config(meta, list(reader.tensors))
        self.names: dict[str, str] = {}
        self.skipped: list[str] = []
        for name in reader.tensors:
            target = hf_name(name)
            if target is None:
                self.skipped.append(name)
            else:
                self.names[target] = name
        if self.skipped:
            log.info("%s: tensors without a Hugging Face parameter, not loaded: %s", reader.path, self.skipped)

    def tensor(self, hf: str) -> np.ndarray:
        """Dense float32 tensor ``hf`` (a Hugging Face parameter name)."""
        source = self.names.get(hf)
        if source is None:
            raise GGUFFileError(f"{self.reader.path}: no tensor maps to {hf!r}")
        dense = self.reader.dequantize(source)
        if source.endswith("attn_q.weight"):
            dense = unpermute_qk(dense, int(self.config["num_attention_heads"]))
        elif source.endswith("attn_k.weight"):
            dense = unpermute_qk(dense, int(self.config["num_key_value_heads"]))
        return dense

    def items(self) -> Iterator[tuple[str, np.ndarray]]:
        """(name, dense tensor) pairs in file order, decoded one at a time."""
        for hf in self.names:
            yield hf, self.tensor(hf)

    def state_dict(self) -> dict[str, np.ndarray]:
        """Every mapped tensor decoded to float32 (tied models have no ``lm_head.weight``)."""
        return dict(self.items())


def read_llama_gguf(path: str | os.PathLike[str]) -> DenseGGUF:
    """Open a llama-architecture .gguf file as a dense source."""
    return DenseGGUF(GGUFReader(path))
