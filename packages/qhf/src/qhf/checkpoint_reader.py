"""Reading a saved quantized checkpoint: its quantization config and each module's layout tensors.

Config priority follows the reference: ``quantize_config.json``, then ``quant_config.json``, then
``config.json``'s ``quantization_config`` — the first that exists wins.

Quantized modules are found and decoded by :class:`qformats.checkpoint.Checkpoint` (one implementation of
the layouts, including GPT-QModel's v1 zero arithmetic: a checkpoint whose ``meta.quantizer`` names
``gptqmodel`` stores a true zero of 0 as the field ``2**bits - 1`` with a borrow from the next field).
QQQ, ParoQuant, VPTQ and EXL3 checkpoints are read through qformats' config parser (:func:`family_config`)
and their modules handed to ``qkernels.weight_only_linear`` (:meth:`QuantizedCheckpoint.weight_only_inputs`).
Dense tensors (embeddings, norms, biases) are read lazily as torch tensors by :class:`TensorReader`.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from qformats.checkpoint import Checkpoint, ModuleEntry, QuantFields
from qformats.checkpoint.family_modules import entry_family, is_family
from qformats.config import QuantizeConfig
from qformats.errors import QFormatsError
from qformats.layouts.families import WeightFamily
from qformats.layouts.registry import LayoutMeta
from qformats.logical import QuantizedWeight

from .config_view import adapter, algorithm, is_weight_only
from .errors import MissingFileError, SourceFormatError
from .quant_config import QuantConfigError, read_quantize_config
from .source.hf_directory import HFDirectory, open_hf_directory
from .source.json_files import read_json_file
from .source.tensor_reader import TensorReader

log = logging.getLogger(__name__)

CONFIG_FILES = ("quantize_config.json", "quant_config.json")


def read_checkpoint_config(directory: Path) -> tuple[QuantizeConfig, str]:
    """The checkpoint's quantization config (:func:`~qhf.quant_config.read_quantize_config`) and its file.

    Files are read through :func:`~qhf.source.json_files.read_json_file` (inside the directory, regular,
    UTF-8, not nested too deeply: each refused naming the file).
    """
    for name in CONFIG_FILES:
        if os.path.lexists(directory / name):
            return _parsed(read_json_file(directory, name), directory / name), name
    if os.path.lexists(directory / "config.json"):
        data = read_json_file(directory, "config.json")
        if isinstance(data, dict) and isinstance(data.get("quantization_config"), dict):
            return _parsed(data["quantization_config"], directory / "config.json"), "config.json"
    raise MissingFileError(
        f"{directory}: no quantization config (looked for {', '.join(CONFIG_FILES)} and config.json's "
        "quantization_config); this does not look like a quantized checkpoint"
    )


def _parsed(raw: Any, path: Path) -> QuantizeConfig:
    """``read_quantize_config(raw)``; its errors, and a structure too deep to walk, name ``path``."""
    try:
        return read_quantize_config(raw)
    except QuantConfigError as exc:  # the same error, naming the file it came from
        raise type(exc)(f"{path}: {exc}") from None
    except RecursionError:
        raise SourceFormatError(f"{path}: nested too deeply to read; expected a flat config object") from None


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    """bfloat16 as float32; FP8 (``F8_E4M3`` / ``F8_E5M2`` in the file) as its uint8 bit patterns."""
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.to(torch.float32)
    elif tensor.dtype.is_floating_point and tensor.dtype.itemsize == 1:
        tensor = tensor.view(torch.uint8)
    return tensor.numpy()


@dataclass
class QuantizedCheckpoint:
    """An opened checkpoint: ``config`` (its quantization config) and ``config_file`` (where it was read),
    ``directory`` (config + weight map), lazy dense ``reader``, and ``modules``, the qformats view that owns every
    quantized module's tensors and decoding."""

    directory: HFDirectory
    config: QuantizeConfig
    config_file: str
    reader: TensorReader
    modules: Checkpoint | None  # None for FP8 / bitsandbytes / GGUF (read by qhf.weight_only)
    _entries: dict[str, ModuleEntry] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.modules is not None:
            self._entries = {entry.prefix: entry for entry in self.modules.modules()}

    def _layout_modules(self) -> Checkpoint:
        if self.modules is None:
            raise SourceFormatError(
                f"{self.directory.path}: a {algorithm(self.config)} checkpoint has no registry-layout modules"
            )
        return self.modules

    def is_quantized(self, module: str) -> bool:
        if self.modules is None:  # FP8 / bitsandbytes / GGUF: the family's marker tensor
            from .weight_only import marker_suffix

            return f"{module}.{marker_suffix(self.config)}" in self.reader
        return module in self._entries

    def weight_only_tensors(self, module: str) -> dict[str, np.ndarray]:
        """A weight-only module's stored tensors keyed by suffix (``weight``, ``weight_scale_inv`` ...) plus
        its ``bias`` if stored (qformats' ``Checkpoint`` does not group these families)."""
        from .weight_only import is_module_tensor

        prefix = module + "."
        tensors = {}
        for name in self.reader.names():
            suffix = name[len(prefix) :]
            if name.startswith(prefix) and "." not in suffix and (is_module_tensor(suffix) or suffix == "bias"):
                tensors[suffix] = _numpy(self.reader.get(name))
        return tensors

    def weight_only_logical(self, module: str, in_features: int, out_features: int) -> Any:
        """The module's FP8 / bitsandbytes / GGUF logical weight read from the files (names the module)."""
        from qkernels.errors import KernelInputError

        from .weight_only import weight_only_logical

        tensors = {k: v for k, v in self.weight_only_tensors(module).items() if k != "bias"}
        try:
            return weight_only_logical(self.config, tensors, in_features, out_features, module)
        except (KernelInputError, QFormatsError) as exc:
            raise SourceFormatError(f"{self.directory.path}: module {module!r}: {exc}") from None

    def build_module(
        self,
        module: str,
        in_features: int,
        out_features: int,
        *,
        backend: str,
        dtype: torch.dtype,
        device: str | torch.device = "cpu",
    ) -> torch.nn.Module:
        """The qkernels module of quantized ``module`` on ``device`` (qkernels selects a backend that serves
        it): ``quant_linear`` for registry layouts, ``weight_only_linear`` for FP8 / bitsandbytes / GGUF
        checkpoints and for QQQ / ParoQuant / VPTQ / EXL3 modules."""
        from qkernels import quant_linear, weight_only_linear

        family = self.module_family(module)
        if family.read is None:  # the integer family: its layout's kernel
            fmt, tensors, meta = self.kernel_inputs(module, in_features, out_features)
            return quant_linear(fmt, tensors, meta, backend=backend, device=device, dtype=dtype)
        name, arrays, options = self.family_kernel_inputs(module, in_features, out_features)
        return weight_only_linear(
            name, arrays, in_features=in_features, out_features=out_features, backend=backend, device=device,
            dtype=dtype, **options,
        )  # fmt: skip

    def module_family(self, module: str) -> WeightFamily:
        """The qformats weight family of quantized ``module``: the config's family for an FP8 / bitsandbytes /
        GGUF checkpoint, else its module entry's (``integer`` for a layout-registry module)."""
        if self.modules is None:
            from .weight_only import weight_family

            return weight_family(self.config)
        return entry_family(self.entry(module))

    def module_logical(self, module: str, in_features: int, out_features: int) -> Any:
        """The logical weight of any quantized ``module`` ``[out_features, in_features]``, read by its weight
        family: a scalar :class:`QuantizedWeight` (:meth:`logical_weight`), a stored family's own object
        (:meth:`family_weight`: QQQ, ParoQuant, VPTQ, EXL3) or a weight-only family's (:meth:`weight_only_logical`).
        Raises :class:`SourceFormatError` naming the module."""
        family = self.module_family(module)
        if family.stored is not None:
            return self.family_weight(module)
        if family.read is not None:
            return self.weight_only_logical(module, in_features, out_features)
        return self.logical_weight(module, in_features, out_features)

    def family_kernel_inputs(
        self, module: str, in_features: int, out_features: int
    ) -> tuple[str, dict[str, Any], dict[str, Any]]:
        """``(family name, tensors, reading options)`` for ``qkernels.weight_only_linear`` of a non-integer module
        (tensors with the ``bias`` when stored): the config's method and ``kernel_options`` for a weight-only
        checkpoint, :meth:`weight_only_inputs` for a stored family's module."""
        if self.modules is None:
            from .weight_only import kernel_family, kernel_options

            return kernel_family(self.config), self.weight_only_tensors(module), kernel_options(self.config, module)
        name, arrays, fields = self.weight_only_inputs(module, in_features, out_features)
        return name, arrays, {"config": fields}

    def entry(self, module: str) -> ModuleEntry:
        """The qformats module entry (layout key, metadata, tensor names) of quantized ``module``."""
        try:
            return self._entries[module]
        except KeyError:
            raise SourceFormatError(f"{self.directory.path}: {module!r} is not a quantized module") from None

    def is_family_module(self, module: str) -> bool:
        """True for a quantized module of a family outside the layout registry (QQQ, ParoQuant, VPTQ, EXL3)."""
        return self.modules is not None and module in self._entries and is_family(self._entries[module].layout)

    def family_weight(self, module: str) -> Any:
        """The family's logical weight of ``module`` (``QQQWeight`` ...; ``dequantize()`` gives ``[out, in]``)."""
        from qformats.checkpoint.family_modules import family_weight

        modules = self._layout_modules()
        entry, config = self.entry(module), modules.fields.config
        if config is None:
            raise SourceFormatError(f"{self.directory.path}: a {entry.layout} checkpoint needs its parsed config")
        try:
            return family_weight(entry, modules.module_tensors(entry), config)
        except QFormatsError as exc:
            raise SourceFormatError(f"{self.directory.path}: {exc}") from None

    def module_tensors(self, module: str) -> dict[str, np.ndarray]:
        """The module's layout tensors keyed by suffix (``qweight``, ``scales``, ...) plus its ``bias`` if stored."""
        tensors = self._layout_modules().module_tensors(self.entry(module))
        if f"{module}.bias" in self.reader:
            tensors["bias"] = _numpy(self.reader.get(f"{module}.bias"))
        return tensors

    def layout_meta(self, module: str, in_features: int, out_features: int) -> LayoutMeta:
        """The kernel metadata of quantized ``module``: its own bits, group size and symmetry (the config's
        after its ``dynamic`` override, as qformats resolved the module) with the expected dimensions."""
        own = self.entry(module).meta
        return LayoutMeta(own.bits, own.group_size, in_features, out_features, own.sym, own.pack_dtype)

    def logical_weight(self, module: str, in_features: int, out_features: int) -> QuantizedWeight:
        """The module's logical weight ``[out_features, in_features]``, decoded by qformats.

        Raises :class:`SourceFormatError` naming the module when the stored dimensions differ from the
        expected ones or the tensors do not decode.
        """
        entry = self.entry(module)
        found = (entry.meta.in_features, entry.meta.out_features)
        if found != (in_features, out_features):
            raise SourceFormatError(
                f"{self.directory.path}: module {module!r}: expected (in, out) = {(in_features, out_features)}, "
                f"the stored tensors give {found}"
            )
        try:
            return self._layout_modules().unpack(entry)
        except QFormatsError as exc:
            raise SourceFormatError(str(exc)) from None

    def weight_only_inputs(
        self, module: str, in_features: int, out_features: int
    ) -> tuple[str, dict[str, Any], dict[str, Any]]:
        """``(family, tensors, config)`` for ``qkernels.weight_only_linear`` of a QQQ / ParoQuant / VPTQ / EXL3
        module (config: the family fields plus the module's bits and group size after dynamic overrides).

        Raises :class:`SourceFormatError` naming the module when the dims its tensors pin differ from the
        model's ``[out_features, in_features]``.
        """
        entry = self.entry(module)
        found = (entry.meta.in_features, entry.meta.out_features)
        if 0 not in found and found != (in_features, out_features):
            raise SourceFormatError(
                f"{self.directory.path}: module {module!r}: expected (in, out) = {(in_features, out_features)}, "
                f"the stored tensors give {found}"
            )
        config = self._layout_modules().fields.config
        settings = dict(config.settings) if config is not None else {}
        settings.update(bits=entry.meta.bits, group_size=entry.meta.group_size)
        return entry.layout, self.module_tensors(module), settings

    def kernel_inputs(self, module: str, in_features: int, out_features: int) -> tuple[str, dict[str, Any], LayoutMeta]:
        """``(format, tensors, meta)`` to build the module's kernel from.

        Normally the stored tensors in the checkpoint's format. A GPT-QModel v1 module holding true zeros of 0
        (stored with a borrow, which a field-by-field reader gets wrong) is instead given as the ``gptq_v2``
        packing of the weight qformats decoded, so the kernel computes with the right zeros.
        """
        meta = self.layout_meta(module, in_features, out_features)
        tensors: dict[str, Any] = self.module_tensors(module)
        entry = self.entry(module)
        if entry.layout != "gptq" or "qzeros" not in tensors or not self._layout_modules().written_by_reference():
            return str(self.config.format), tensors, meta
        weight = self.logical_weight(module, in_features, out_features)
        if not weight.meta.get("v1_reference_borrow_fields"):
            return str(self.config.format), tensors, meta
        from qformats.transcode import transcode_weight

        log.info("%s: %s read with GPT-QModel's v1 zero arithmetic (as gptq_v2)", self.directory.path, module)
        packed = dict(transcode_weight(weight, "gptq_v2").tensors)
        if "bias" in tensors:
            packed["bias"] = tensors["bias"]
        return "gptq_v2", packed, meta


def family_config(fields: QuantFields, path: Path) -> QuantizeConfig:
    """The config of a QQQ / ParoQuant / VPTQ / EXL3 checkpoint: the one qformats parsed (VPTQ's codebook sizes,
    EXL3's float bits-per-weight ...), its method named by the family key (``meta.algorithm``) and no EoRA adapter.

    qhf's own config reader knows the families it quantizes to; these were parsed and checked by qformats'.
    """
    config = fields.config
    if config is None:
        raise SourceFormatError(f"{path}: a {fields.layout} checkpoint needs its parsed quantization config")
    if algorithm(config) == fields.layout and adapter(config) is None:
        return config
    return config.with_changes(
        meta={**config.meta, "algorithm": fields.layout}, settings={**config.settings, "adapter": None}
    )


def open_quantized_checkpoint(path: str | Path) -> QuantizedCheckpoint:
    path = Path(path)
    directory = open_hf_directory(path)
    modules: Checkpoint | None = None
    config: QuantizeConfig | None = None
    config_file = ""
    config_error: QuantConfigError | None = None
    try:
        config, config_file = read_checkpoint_config(path)
    except QuantConfigError as exc:  # qhf's reader knows GPTQ/AWQ/RTN/weight-only; the families are qformats'
        config_error = exc
    if config is None or not is_weight_only(config):  # FP8 / bitsandbytes / GGUF are read by qhf.weight_only
        try:
            modules = Checkpoint(path)
            modules.require_valid()  # the rules inspect reports, refused by name (qformats' one validation path)
        except QFormatsError as exc:
            if config_error is not None:
                raise config_error from None  # a malformed config is reported as such first
            raise SourceFormatError(str(exc)) from None
        if is_family(modules.fields.layout):
            config, config_file = family_config(modules.fields, path), modules.fields.source_file
    if config is None:
        raise config_error if config_error is not None else SourceFormatError(f"{path}: no quantization config")
    return QuantizedCheckpoint(directory, config, config_file, TensorReader(directory.weight_map), modules)


def load_config_json(path: Path) -> dict[str, Any]:
    """``config.json`` of directory ``path`` as a dict (read with the checks of :func:`read_json_file`)."""
    data = read_json_file(Path(path), "config.json")
    if not isinstance(data, dict):
        raise SourceFormatError(f"{Path(path) / 'config.json'}: expected a JSON object, found {type(data).__name__}")
    return data
