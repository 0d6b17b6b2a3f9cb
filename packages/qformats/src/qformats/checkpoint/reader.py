"""Opening a checkpoint directory: safetensors files, the shard index, the config, the module map.

Reading never executes code: only ``.safetensors`` files are read. A directory (or file) holding
only pickle-based weights (``.bin``, ``.pt``, ``.pth``, ``.ckpt``) is refused with a message on how to
convert it safely.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..config.model import QuantizeConfig
from ..errors import CheckpointFormatError, LayoutError, TranscodeError
from ..layouts.families import get_family
from ..layouts.registry import get_layout
from ..logical import QuantizedWeight
from ..violations import Violation
from .config_files import QuantFields, find_quant_config, read_quant_fields
from .contained import inside_directory
from .dense_checks import dense_violations, orphan_violations, unexpected_names
from .dtypes import SAFETENSORS_DTYPES
from .family_modules import (
    dims_known,
    family_dense,
    family_violations,
    family_weight,
    group_family_modules,
    is_family,
    resolve_family_module,
)
from .modules import ModuleEntry, group_modules, resolve_module, split_name
from .publish import INCOMPLETE_MARKER
from .publish_journal import journal_path
from .safetensors_io import SafetensorsFile
from .value_checks import layer_count_violation, unknown_tensors, weight_value_violations

log = logging.getLogger(__name__)

INDEX_NAME = "model.safetensors.index.json"
EXCLUDED_RULE = "CONFIG-EXCLUDED"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")
CONVERT_HINT = (
    "pickle-based weights can execute code when loaded, so qformats never reads them. Convert them once, "
    "in an environment you trust, with torch.load(path, weights_only=True) followed by "
    "safetensors.torch.save_file(state_dict, 'model.safetensors'), then point qformats at the result"
)


def refuse_pickle(path: Path) -> CheckpointFormatError:
    """The error for a pickle-based weights file (names it and says how to convert it)."""
    return CheckpointFormatError(f"{path}: refused: {CONVERT_HINT}")


class Checkpoint:
    """A read-only view of a quantized checkpoint directory (headers parsed eagerly, tensors on demand).

    QQQ, ParoQuant, VPTQ and EXL3 checkpoints (the weight families with ``stored`` modules) are read
    through :mod:`.family_modules`, which asks each family's registry record; ``shapes``
    (``{module prefix: (in_features, out_features)}``) gives dims their tensors do not pin (VPTQ).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        fields: QuantFields | None = None,
        shapes: Mapping[str, tuple[int, int]] | None = None,
    ) -> None:
        root = Path(path)
        if root.is_file():
            if root.suffix in PICKLE_SUFFIXES:
                raise refuse_pickle(root)
            raise CheckpointFormatError(f"{root}: expected a checkpoint directory, found a file")
        if not root.is_dir():
            hint = ""
            if journal_path(root.resolve()).is_file():
                hint = f" (an interrupted save left {journal_path(root.resolve()).name}: the next save restores it)"
            raise CheckpointFormatError(f"{root}: no such checkpoint directory{hint}")
        if (root / INCOMPLETE_MARKER).exists():
            raise CheckpointFormatError(
                f"{root}: holds an {INCOMPLETE_MARKER} marker: a save into it was interrupted, so its files are "
                "not one complete checkpoint; save it again"
            )
        self.root = root
        self.warnings: list[str] = []
        self.index_metadata: dict[str, object] = {}
        self.files: dict[str, SafetensorsFile] = {}
        self.weight_map = self._load_weight_map()
        if fields is None:
            config_path, raw = find_quant_config(root)
            inside_directory(root, config_path.name)
            fields = read_quant_fields(raw, source_file=config_path.name)
        self.fields = fields
        self.shapes = dict(shapes or {})
        self._modules: list[ModuleEntry] | None = None
        self._excluded_quantized: list[str] = []
        self._reference_writer: bool | None = None

    # -- discovery -----------------------------------------------------------------------------
    def _load_weight_map(self) -> dict[str, str]:
        index = self.root / INDEX_NAME
        if index.is_file():
            return self._from_index(index)
        files = sorted(p.name for p in self.root.glob("*.safetensors"))
        if not files:
            pickles = sorted(p for p in self.root.iterdir() if p.suffix in PICKLE_SUFFIXES)
            if pickles:
                raise refuse_pickle(pickles[0])
            raise CheckpointFormatError(f"{self.root}: no .safetensors weights found")
        weight_map: dict[str, str] = {}
        for name in files:
            handle = self._open(name)
            for tensor in handle.keys():
                if tensor in weight_map:
                    raise CheckpointFormatError(
                        f"{self.root}: duplicate tensor name {tensor!r} in {weight_map[tensor]} and {name}"
                    )
                weight_map[tensor] = name
        return weight_map

    def _from_index(self, index: Path) -> dict[str, str]:
        inside_directory(self.root, index.name)
        try:
            data = json.loads(index.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CheckpointFormatError(f"{index}: unreadable index ({exc})") from None
        except RecursionError:
            raise CheckpointFormatError(f"{index}: JSON nested too deeply; expected a shard index") from None
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise CheckpointFormatError(f"{index}: expected an object with a 'weight_map' of name -> file")
        self.index_metadata = dict(data.get("metadata") or {})
        total = 0
        seen: dict[str, str] = {}
        for shard in sorted(set(weight_map.values())):
            if Path(shard).name != shard:
                raise CheckpointFormatError(f"{index}: shard name {shard!r} must be a plain file name")
            if not os.path.lexists(self.root / shard):
                raise CheckpointFormatError(f"{index}: shard {shard!r} is listed but missing")
            handle = self._open(shard)
            for tensor, info in handle.tensors.items():
                total += info.nbytes
                if tensor in seen:
                    raise CheckpointFormatError(
                        f"{self.root}: duplicate tensor name {tensor!r} in {seen[tensor]} and {shard}"
                    )
                seen[tensor] = shard
                if weight_map.get(tensor) != shard:
                    raise CheckpointFormatError(
                        f"{index}: tensor {tensor!r} in {shard} has no index entry pointing at it "
                        f"(index says {weight_map.get(tensor)!r})"
                    )
        for tensor, shard in weight_map.items():
            if tensor not in self.files[shard].tensors:
                raise CheckpointFormatError(f"{index}: tensor {tensor!r} is indexed in {shard} but absent from it")
        declared = self.index_metadata.get("total_size")
        if declared is not None and declared != total:
            message = f"{index}: metadata.total_size is {declared}, the shards hold {total} tensor bytes"
            log.warning(message)
            self.warnings.append(message)
        return dict(weight_map)

    def _open(self, name: str) -> SafetensorsFile:
        if name not in self.files:
            self.files[name] = SafetensorsFile(inside_directory(self.root, name))
        return self.files[name]

    # -- tensors -------------------------------------------------------------------------------
    def shape_of(self, name: str) -> tuple[tuple[int, ...], str]:
        """``(shape, numpy dtype name as read)`` of a tensor, from the headers only."""
        info = self.files[self.weight_map[name]].tensors[name]
        dtype = "float32" if info.dtype == "BF16" else SAFETENSORS_DTYPES[info.dtype][0].name
        return info.shape, dtype

    def stored_dtype(self, name: str) -> str:
        """The safetensors dtype name of a tensor as stored (``"BF16"``, ``"F16"`` ...), from the headers only;
        :meth:`shape_of` gives the dtype it is read as (BF16 is read as float32)."""
        return str(self.files[self.weight_map[name]].tensors[name].dtype)

    def load(self, name: str) -> np.ndarray:
        """One tensor by full name (raises naming the tensor when it is not in the checkpoint)."""
        try:
            shard = self.weight_map[name]
        except KeyError:
            raise CheckpointFormatError(f"{self.root}: no tensor named {name!r}") from None
        return self.files[shard].load(name)

    def total_size(self) -> int:
        """Sum of tensor bytes over every shard."""
        return sum(info.nbytes for f in self.files.values() for info in f.tensors.values())

    # -- modules -------------------------------------------------------------------------------
    def modules(self) -> list[ModuleEntry]:
        """Every quantized module (prefix order), with its layout and dimensions resolved."""
        if self._modules is None:
            shapes = {name: self.shape_of(name) for name in self.weight_map}
            entries = []
            excluded = []
            for marker, entry in self._resolved(shapes):
                if entry is None:
                    excluded.append(marker)
                else:
                    entries.append(entry)
            self._excluded_quantized = excluded
            self._modules = self._settle_marlin_labels(entries)
            unknown = unknown_tensors(self.weight_map, self._modules)
            if unknown:
                message = (
                    f"{self.root}: {len(unknown)} unknown tensor(s) inside quantized modules, ignored by readers: "
                    + ", ".join(unknown)
                )
                log.warning(message)
                self.warnings.append(message)
        return self._modules

    def _resolved(self, shapes: Mapping[str, tuple[tuple[int, ...], str]]) -> list[tuple[str, ModuleEntry | None]]:
        """``(marker tensor name, entry or None when kept dense)`` for every module, registry or family."""
        key = self.fields.layout
        if not is_family(key):
            groups = group_modules(self.weight_map)
            return [(m["qweight"], resolve_module(p, m, shapes, self.fields)) for p, m in groups.items()]
        config = self._family_config()
        marker = get_family(key).markers[0]
        found = []
        for prefix, members in group_family_modules(key, self.weight_map).items():
            entry = resolve_family_module(prefix, members, shapes, config, key, self.shapes.get(prefix))
            found.append((members[marker], entry))
        return found

    def _family_config(self) -> QuantizeConfig:
        if self.fields.config is None:
            raise CheckpointFormatError(f"{self.root}: a {self.fields.layout} checkpoint needs its parsed config")
        return self.fields.config

    def _settle_marlin_labels(self, entries: list[ModuleEntry]) -> list[ModuleEntry]:
        """``format: marlin`` modules with GPTQ-layout tensors: pick v1/v2 from the zero words, and say so."""
        plain = [e for e in entries if self.fields.format == "marlin" and e.layout == "gptq"]
        if not plain:
            return entries
        from ..zero_convention import V2, detect_zero_convention

        report = detect_zero_convention(self.module_tensors(plain[0]), plain[0].meta)
        key = "gptq_v2" if report.convention == V2 and report.confidence in ("certain", "high") else "gptq"
        message = (
            f"{self.root}: format 'marlin' with GPTQ-layout tensors in {len(plain)} module(s) "
            f"(the reference re-tiles at load time); read as {key!r}: {report.evidence}"
        )
        log.warning(message)
        self.warnings.append(message)
        return [replace(e, layout=key) if e.layout == "gptq" else e for e in entries]

    def module_tensors(self, entry: ModuleEntry) -> dict[str, np.ndarray]:
        """The module's layout tensors keyed by suffix (``qweight``, ``scales``, ...)."""
        return {suffix: self.load(name) for suffix, name in entry.tensors.items()}

    def unpack(self, entry: ModuleEntry, tensors: Mapping[str, np.ndarray] | None = None) -> QuantizedWeight:
        """The module's logical weight (raises :class:`CheckpointFormatError` naming the module).

        The layout's ``unpack`` runs its ``validate`` first and refuses tensors with any violation
        (the message lists every rule id), so no unvalidated tensor becomes a logical weight; scales
        that are NaN/Inf/0 and zeros that break a ``sym`` config are refused too
        (:mod:`~qformats.checkpoint.value_checks`). QQQ and ParoQuant modules give their exact scalar
        weight (per-channel or exactly-grouped QQQ, identity-transform ParoQuant) or raise saying why; VPTQ
        and EXL3 modules raise (use :meth:`dense`).
        """
        data = self.module_tensors(entry) if tensors is None else tensors
        if is_family(entry.layout):
            return self._family_as_scalar(entry, data)
        try:
            weight = self._unpack_unchecked(entry, data)
        except LayoutError as exc:
            raise CheckpointFormatError(f"{self.root}: module {entry.prefix!r}: {exc}") from None
        problems = weight_value_violations(weight)
        if problems:
            raise CheckpointFormatError(f"{self.root}: module {entry.prefix!r}: " + "; ".join(str(v) for v in problems))
        return weight

    def _family_as_scalar(self, entry: ModuleEntry, data: Mapping[str, np.ndarray]) -> QuantizedWeight:
        """QQQ (per-channel, or grouped when exact) and identity-transform ParoQuant as a scalar weight."""
        weight = family_weight(entry, data, self._family_config())
        if get_family(entry.layout).scalar is None:
            raise CheckpointFormatError(
                f"{self.root}: module {entry.prefix!r}: {entry.layout} is not a scales * (codes - zeros) weight; "
                "read its dense weight with Checkpoint.dense"
            )
        try:
            return weight.to_quantized_weight()  # type: ignore[no-any-return]
        except TranscodeError as exc:
            raise CheckpointFormatError(f"{self.root}: module {entry.prefix!r}: {exc}") from None

    def dense(self, entry: ModuleEntry, tensors: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """float32 ``[out, in]``: the module's dense equivalent weight, for every layout and family."""
        data = self.module_tensors(entry) if tensors is None else tensors
        if is_family(entry.layout):
            return family_dense(entry, data, self._family_config())
        return self.unpack(entry, data).dequantize()

    def written_by_reference(self) -> bool:
        """True when the config's ``meta.quantizer`` names GPT-QModel (the reference implementation)."""
        if self._reference_writer is None:
            meta = self.fields.config.meta if self.fields.config is not None else {}
            quantizer = meta.get("quantizer")
            names = quantizer if isinstance(quantizer, list) else [quantizer]
            self._reference_writer = any(str(q).lower().startswith("gptqmodel") for q in names if q)
        return self._reference_writer

    def _unpack_reference_v1(self, entry: ModuleEntry, data: Mapping[str, np.ndarray]) -> QuantizedWeight:
        """A GPT-QModel ``gptq`` (v1) module read with the reference's own v1 -> v2 arithmetic.

        GPT-QModel writes v1 zeros by subtracting a constant word from the true-zero words (2/4/8-bit;
        3-bit moves each field modulo 2**bits), so a true zero of 0 is stored as the field 2**bits - 1
        and, for 2/4/8-bit, borrows one from the next field of the word. Its loader adds the constant
        back. Reading field by field (``zero = field + 1``) would give 2**bits for that field and an
        off-by-one neighbour; adding the word back, as the reference does, recovers the true zeros.
        Identical to the per-field reading when no field is 2**bits - 1.
        """
        from ..layouts.gptq.zeros import v1_to_v2

        conversion = v1_to_v2(np.asarray(data["qzeros"]), entry.meta.bits, columns=entry.meta.out_features)
        weight = get_layout("gptq_v2").unpack({**data, "qzeros": conversion.qzeros}, entry.meta)
        weight.meta["source_format"] = "gptq"
        if conversion.overflow_fields:
            message = (
                f"{self.root}: module {entry.prefix!r}: {conversion.overflow_fields} v1 zero field(s) hold "
                f"2**bits - 1; read with GPT-QModel's v1 arithmetic (true zero 0, borrow restored)"
            )
            log.warning(message)
            self.warnings.append(message)
            weight.meta["v1_reference_borrow_fields"] = conversion.overflow_fields
        return weight

    def validate(self) -> dict[str, list[Violation]]:
        """Violations per module prefix (only modules with findings are listed).

        Besides each module's layout rules and value rules (``VALUE-SCALES``, ``VALUE-SYM-ZEROS``), a
        ``qweight`` under a prefix that a negative dynamic rule keeps dense is reported as
        ``CONFIG-EXCLUDED`` (the rule id :func:`qformats.validate` uses), a ``config.json`` layer count
        that disagrees with the tensors as ``CONFIG-LAYERS`` under the key ``"<config>"``, layout tensors
        without their module's marker as ``LAYOUT-ORPHAN`` under ``"<orphans>"`` and dense tensors with
        NaN/Inf (or all-zero matrices) as ``VALUE-DENSE`` under the tensor's name
        (:mod:`.dense_checks`; every dense tensor is read, so its crc32 is verified). A VPTQ module
        whose dims are unknown (see :mod:`.family_modules`) is skipped with a warning.
        """
        found: dict[str, list[Violation]] = {}
        for name in self.excluded_quantized():
            found[split_name(name)[0]] = [
                Violation(EXCLUDED_RULE, name, "a dense module (negative dynamic rule)", "quantized")
            ]
        layers = layer_count_violation(self.root, self.weight_map)
        if layers is not None:
            found["<config>"] = [layers]
        dense = self.dense_names(strict=False)
        orphans = orphan_violations(dense, self.modules(), self.excluded_quantized())
        if orphans:
            found["<orphans>"] = orphans
        found.update(dense_violations([n for n in dense if n not in {v.tensor for v in orphans}], self.load))
        unexpected = unexpected_names(n for n in dense if n not in {v.tensor for v in orphans})
        if unexpected:
            self._warn(
                f"{self.root}: {len(unexpected)} tensor(s) outside every quantized module that no model module "
                f"holds (not a weight or bias): {', '.join(unexpected[:8])}"
            )
        for entry in self.modules():
            if is_family(entry.layout) and not dims_known(entry):
                self._warn(
                    f"{self.root}: module {entry.prefix!r} ({entry.layout}): in/out are not recoverable from its "
                    "tensors, so it was not checked; pass shapes= (qhf.load_quantized checks it against the model)"
                )
                continue
            tensors = self.module_tensors(entry)
            if is_family(entry.layout):
                problems = family_violations(entry, tensors, self._family_config())
            else:
                problems = get_layout(entry.layout).validate(tensors, entry.meta)
                if not problems:
                    problems = weight_value_violations(self._unpack_unchecked(entry, tensors))
            if problems:
                found[entry.prefix] = problems
        return found

    def require_valid(self) -> None:
        """Raise :class:`CheckpointFormatError` listing every finding of :meth:`validate` (rule ids included).

        The one validation path of every loader (``qhf.load_quantized``, ``lowbit eval``, ``lowbit convert``,
        ``export_dense``): the same rules ``inspect`` reports, refused by name.
        """
        found = self.validate()
        if found:
            lines = [f"{where}: {v}" for where, problems in found.items() for v in problems]
            shown = "; ".join(lines[:12]) + (f"; ... and {len(lines) - 12} more" if len(lines) > 12 else "")
            raise CheckpointFormatError(f"{self.root}: {len(lines)} violation(s), refused: {shown}")

    def _unpack_unchecked(self, entry: ModuleEntry, data: Mapping[str, np.ndarray]) -> QuantizedWeight:
        """The logical weight without the value checks (the layout's own rules still run)."""
        if entry.layout == "gptq" and "qzeros" in data and self.written_by_reference():
            return self._unpack_reference_v1(entry, data)
        return get_layout(entry.layout).unpack(data, entry.meta)

    def _warn(self, message: str) -> None:
        if message not in self.warnings:
            log.warning(message)
            self.warnings.append(message)

    def excluded_quantized(self) -> list[str]:
        """``qweight`` names of modules a negative dynamic rule keeps dense (a file that breaks its config)."""
        self.modules()
        return list(self._excluded_quantized)

    def dense_names(self, *, strict: bool = True) -> list[str]:
        """Tensor names that belong to no quantized module's layout tensors.

        With ``strict`` (the default), raises :class:`CheckpointFormatError` when a module the config
        keeps dense holds packed tensors (they would otherwise pass through as if they were dense).
        """
        stray = self.excluded_quantized()
        if stray and strict:
            raise CheckpointFormatError(
                f"{self.root}: {EXCLUDED_RULE}: {', '.join(stray)} packed, but a negative dynamic rule of "
                f"{self.fields.source_file or 'the config'} keeps the module dense"
            )
        owned = {name for entry in self.modules() for name in entry.tensors.values()}
        return [name for name in self.weight_map if name not in owned]


def open_checkpoint(path: str | Path, *, shapes: Mapping[str, tuple[int, int]] | None = None) -> Checkpoint:
    """Open and check a checkpoint directory (see :class:`Checkpoint`)."""
    return Checkpoint(path, shapes=shapes)
