"""A lowbit checkpoint directory (or a dense Hugging Face directory) -> one .gguf file for llama.cpp.

What each kind of directory contributes (Hugging Face names; :mod:`.model_writer` maps and writes them):

* dense directory (no quantization config): every tensor dense; 2-D weights are encoded to ``qtype``.
* ``method: gguf`` weight-only directory: each module's ``qweight`` block bytes go across unchanged
  (the ggml type comes from the config's ``bits`` + ``format``); dense tensors as above.
* integer checkpoints (GPTQ, AWQ, RTN, ... any layout ``qformats.checkpoint`` reads): a module that is
  exactly a GGUF type-0 block (4/5/8-bit, symmetric with the fixed zero 8/16/128, group 32, natural order,
  fp16 scales, rows of whole 32-blocks) is transcoded bit exactly to Q4_0 / Q5_0 / Q8_0; every other
  module is dequantized to float32 and requantized to ``qtype`` (lossy; counted in the summary).

Other weight-only families (FP8, bitsandbytes) are refused with a named error.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..checkpoint.config_files import QuantFields
from ..checkpoint.family_modules import is_family
from ..checkpoint.reader import Checkpoint, open_checkpoint
from ..layouts.families import families_of_method
from ..layouts.gguf import tensor_type
from ..layouts.gguf.layout import GGUFLayout
from ..logical import QuantizedWeight
from .errors import GGUFFileError
from .model_writer import GGUFWriteSummary, write_model_gguf
from .reader import GGUFReader
from .tokenizer_metadata import tokenizer_from_gguf, tokenizer_from_hf
from .writer import TensorSource

#: The fields of a directory without a quantization config (only its weight map and tensors are read).
_DENSE_FIELDS = QuantFields(bits=16, group_size=-1, sym=True, method="none", format="none", layout="none",
                            pack_dtype="int32")  # fmt: skip


@dataclass
class ExportReport:
    """How each module got into the file: ``exact`` (transcoded bit exactly), ``carried`` (gguf block bytes
    unchanged), ``requantized`` (dequantized and encoded to ``qtype``) and ``dense`` (a dense tensor encoded
    or stored as F32)."""

    kind: str
    exact: list[str] = field(default_factory=list)
    carried: list[str] = field(default_factory=list)
    requantized: list[str] = field(default_factory=list)
    dense: list[str] = field(default_factory=list)
    written: GGUFWriteSummary | None = None


def _model_config(root: Path) -> tuple[dict[str, Any], dict[str, Any] | None]:
    path = root / "config.json"
    if not path.is_file():
        raise GGUFFileError(f"{root}: no config.json; a .gguf needs the model's hyperparameters")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise GGUFFileError(f"{path}: unreadable JSON ({exc})") from None
    quant = config.pop("quantization_config", None)
    if quant is None and (root / "quantize_config.json").is_file():
        quant = json.loads((root / "quantize_config.json").read_text(encoding="utf-8"))
    return config, quant


def _exact_gguf(weight: QuantizedWeight) -> tuple[np.ndarray, str] | None:
    """The Q4_0 / Q5_0 / Q8_0 bytes of ``weight`` when it is exactly one, else None."""
    if weight.codes.shape[1] % 32 or GGUFLayout().cannot_represent(weight) is not None:
        return None
    qweight = GGUFLayout().pack(weight)["qweight"]
    return qweight, {4: "Q4_0", 5: "Q5_0", 8: "Q8_0"}[weight.bits]


def _integer_tensors(ck: Checkpoint, report: ExportReport) -> Iterator[tuple[str, TensorSource]]:
    for entry in ck.modules():
        name = f"{entry.prefix}.weight"
        exact = None if is_family(entry.layout) else _exact_gguf(ck.unpack(entry))
        if exact is not None:
            report.exact.append(entry.prefix)
            yield name, exact
        else:
            report.requantized.append(entry.prefix)
            yield name, ck.dense(entry)
    for name in ck.dense_names():
        report.dense.append(name)
        yield name, ck.load(name)


def _gguf_tensors(ck: Checkpoint, qtype: str, report: ExportReport) -> Iterator[tuple[str, TensorSource]]:
    for name in ck.weight_map:
        if name.endswith(".qweight"):
            report.carried.append(name[: -len(".qweight")])
            yield name[: -len(".qweight")] + ".weight", (ck.load(name), qtype)
        else:
            report.dense.append(name)
            yield name, ck.load(name)


def directory_tensors(
    root: Path, quant: dict[str, Any] | None, report: ExportReport
) -> Iterator[tuple[str, TensorSource]]:
    """(Hugging Face name, dense array or (bytes, qtype)) for every tensor of ``root`` (see the module doc)."""
    if quant is None:
        ck = Checkpoint(root, fields=_DENSE_FIELDS)
        for name in ck.weight_map:
            report.dense.append(name)
            yield name, ck.load(name)
        return
    method = str(quant.get("method") or quant.get("quant_method") or "").lower()
    families = families_of_method(method)  # none: an integer method (GPTQ / AWQ / RTN ...)
    if any(family.gguf_blocks for family in families):  # GGUF blocks: copied as they are
        qtype = tensor_type(quant.get("bits", 4), quant.get("format")).name
        yield from _gguf_tensors(Checkpoint(root, fields=_DENSE_FIELDS), qtype, report)
    elif any(family.weight_only for family in families):  # FP8, bitsandbytes: no GGUF type holds them
        raise GGUFFileError(f"{root}: quantization method {method!r}: only integer (GPTQ/AWQ/RTN ...), gguf and "
                            "dense directories convert to a .gguf")  # fmt: skip
    else:
        yield from _integer_tensors(open_checkpoint(root), report)


def export_directory(
    root: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    qtype: str = "Q8_0",
    embed_qtype: str = "Q8_0",
    tokenizer_gguf: str | os.PathLike[str] | None = None,
    name: str | None = None,
) -> ExportReport:
    """Write ``out`` (a .gguf) from directory ``root``; the tokenizer comes from ``tokenizer_gguf`` (a .gguf
    whose ``tokenizer.*`` keys are carried across) or else from ``root/tokenizer.json``. ``general.name`` is
    ``name`` (default: the directory's name)."""
    source = Path(root)
    config, quant = _model_config(source)
    tokenizer = tokenizer_from_gguf(GGUFReader(tokenizer_gguf)) if tokenizer_gguf else tokenizer_from_hf(source, config)
    report = ExportReport("dense" if quant is None else str(quant.get("method") or quant.get("quant_method")))
    report.written = write_model_gguf(
        out, config, directory_tensors(source, quant, report), tokenizer, qtype=qtype, embed_qtype=embed_qtype,
        name=name or source.name,
    )  # fmt: skip
    return report
