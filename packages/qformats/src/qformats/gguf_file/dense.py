"""Read a .gguf file as a dense float32 source: Hugging Face names, config, and tensors on demand.

:func:`read_gguf` picks the file's architecture record (:mod:`.architecture_table`; an unknown architecture
is refused listing the known ones, one that transformers maps but the table does not also with the reason) and
returns a :class:`DenseGGUF` whose ``config`` is a Hugging Face style dict for that architecture and whose
:meth:`~DenseGGUF.tensor` decodes one parameter at a time (so a caller can stream a model without holding every
layer in float32); :meth:`~DenseGGUF.state_dict` decodes all of them. :func:`read_llama_gguf` is the same for
llama files only.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from .architecture import GGUFArchitecture, architecture_for
from .architecture_table import ARCHITECTURES, REFUSED_ARCHITECTURES, architecture_record
from .errors import GGUFFileError
from .hf_config import hf_config
from .reader import GGUFReader
from .tensor_map import MappedTensor, map_tensors

log = logging.getLogger(__name__)


class DenseGGUF:
    """A .gguf viewed as named dense float32 tensors (numpy shapes, Hugging Face names).

    ``architecture``: the record used; ``config``: the Hugging Face style config dict; ``names``: Hugging Face
    name -> the file tensors it is read from (file order; two for fused experts); ``skipped``: file tensors
    without a Hugging Face parameter (``rope_freqs.weight``), not loaded.
    """

    def __init__(self, reader: GGUFReader, architecture: GGUFArchitecture) -> None:
        self.reader = reader
        self.architecture = architecture
        meta = {key: reader.value(key) for key in reader.metadata}
        self.config: dict[str, Any] = hf_config(architecture, meta, list(reader.tensors), reader.path)
        if architecture.config_rule is not None:
            architecture.config_rule(self.config, reader)
        layers = int(self.config["num_hidden_layers"])
        self._mapped: dict[str, MappedTensor]
        self._mapped, self.skipped = map_tensors(architecture, reader.tensors, layers, reader.path)
        self.names: dict[str, tuple[str, ...]] = {hf: m.sources for hf, m in self._mapped.items()}
        if self.skipped:
            log.info("%s: tensors without a Hugging Face parameter, not loaded: %s", reader.path, self.skipped)

    def _entry(self, hf: str) -> MappedTensor:
        entry = self._mapped.get(hf)
        if entry is None:
            raise GGUFFileError(f"{self.reader.path}: no tensor maps to {hf!r}")
        return entry

    def tensor(self, hf: str) -> np.ndarray:
        """Dense float32 tensor ``hf`` (a Hugging Face parameter name), in the Hugging Face shape."""
        entry = self._entry(hf)
        arrays = [self.reader.dequantize(name) for name in entry.sources]
        try:
            return entry.conversion.apply(arrays, self.config)
        except GGUFFileError as exc:
            raise GGUFFileError(f"{self.reader.path}: tensor {', '.join(entry.sources)} ({hf}): {exc}") from None

    def shape(self, hf: str) -> tuple[int, ...]:
        """The Hugging Face shape of ``hf`` from the file's tensor infos (nothing decoded)."""
        entry = self._entry(hf)
        return entry.conversion.shape([self.reader.tensors[name].shape for name in entry.sources])

    def nbytes(self, hf: str) -> int:
        """Bytes of ``hf`` decoded to float32."""
        return math.prod(self.shape(hf)) * 4

    def items(self) -> Iterator[tuple[str, np.ndarray]]:
        """(name, dense tensor) pairs in file order, decoded one at a time."""
        for hf in self._mapped:
            yield hf, self.tensor(hf)

    def state_dict(self) -> dict[str, np.ndarray]:
        """Every mapped tensor decoded to float32 (tied models have no ``lm_head.weight``)."""
        return dict(self.items())


def read_gguf(path: str | os.PathLike[str]) -> DenseGGUF:
    """Open a .gguf file of any architecture in :data:`~.architecture_table.ARCHITECTURES` as a dense source."""
    reader = GGUFReader(path)
    keys: tuple[str, ...] = ("general.architecture", "general.name")
    meta = {key: reader.value(key) for key in keys if key in reader.metadata}
    record = architecture_for(meta, ARCHITECTURES, reader.path, list(reader.tensors), REFUSED_ARCHITECTURES)
    return DenseGGUF(reader, record)


def read_llama_gguf(path: str | os.PathLike[str]) -> DenseGGUF:
    """Open a llama-architecture .gguf file as a dense source (other architectures are refused)."""
    reader = GGUFReader(path)
    arch = reader.value("general.architecture")
    if arch != "llama":
        raise GGUFFileError(f"{reader.path}: general.architecture: expected 'llama', found {arch!r}")
    return DenseGGUF(reader, architecture_record("llama"))
