"""The quickstart's second artifact: its saved directory as one llama.cpp ``.gguf`` file, read back and evaluated.

At the quickstart's default settings (GPTQ 4-bit, symmetric, group 32, natural column order) every quantized
module is a GGUF Q4_0 block row bit for bit, so the file holds the GPTQ result itself; the tied embedding goes in
as Q8_0 (as in the SmolLM2 source), the norms as F32. The file is then read by lowbit (qformats' GGUF reader,
dequantized by qhf) and evaluated on the same text as the directory, and checked against the engine catalog.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .report_tables import human_bytes, path_bytes

#: Requantization type for modules that are not exact Q4_0 rows (another bit width, group or zero).
GGUF_TYPE = "Q4_0"


@dataclass(frozen=True)
class QuickstartGGUF:
    """What was written: ``path``, its size ``nbytes``, how many modules went across ``exact`` (bit for bit)
    or were ``requantized`` (lossy), the perplexity lowbit computes from the file, the source's size in bytes
    and the engine kernels that load the file."""

    path: Path
    nbytes: int
    exact: int
    requantized: int
    perplexity: float
    source_bytes: int
    loaded_by: tuple[str, ...]

    def describe(self) -> str:
        size = human_bytes(self.nbytes)
        versus = "smaller" if self.nbytes < self.source_bytes else "not smaller"
        return (
            f"{size} .gguf ({versus} than the {human_bytes(self.source_bytes)} source); {self.exact} modules "
            f"bit exact as {GGUF_TYPE}, {self.requantized} requantized; perplexity {self.perplexity:.3f} "
            f"(lowbit's reading of the file); loaded by {', '.join(self.loaded_by) or 'none'}"
        )


def write_and_evaluate(
    path: Path, directory: Path, model_path: Path, config: dict[str, Any], *, window: int, windows: int
) -> QuickstartGGUF:
    """Write ``path`` from the saved ``directory`` (tokenizer from ``model_path`` when it is a .gguf), then
    evaluate it over ``windows`` windows of ``window`` tokens. ``config`` is the quickstart's quantize config
    (only used to open the file as a model)."""
    import qhf
    from qformats.gguf_file.directory_export import export_directory

    from .engine_lines import gguf_file_verdicts

    tokenizer = model_path if model_path.is_file() and model_path.suffix.lower() == ".gguf" else None
    report = export_directory(directory, path, qtype=GGUF_TYPE, tokenizer_gguf=tokenizer, name=directory.name)
    written = report.written
    nbytes = written.nbytes if written is not None else path.stat().st_size
    model = qhf.load(path, config)
    model.source.materialize_all()
    result = model.perplexity(window=window, max_windows=windows)
    loads = tuple(v.kernel.key for v in gguf_file_verdicts(path) if v.loads)
    return QuickstartGGUF(
        path, nbytes, len(report.exact), len(report.requantized), result.perplexity, path_bytes(model_path), loads
    )
