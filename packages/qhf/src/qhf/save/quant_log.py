"""The per-module rows of ``quant_log.csv`` and of ``quant_report.json``'s ``modules`` list.

The file columns are :data:`REPORT_COLUMNS`; they are the file format and are read by other tools, so
they keep their names: ``samples`` is qlooper's ``ModuleReport.tokens`` (calibration tokens the module
saw) and ``fallback`` is the fallback reason, else the fallback strategy's name.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qlooper.report import ModuleReport

REPORT_COLUMNS = ("layer", "module", "loss", "samples", "damp", "fallback", "seconds")


def log_row(name: str, row: ModuleReport | None) -> dict[str, Any]:
    """The file row of module ``name`` (every :data:`REPORT_COLUMNS` key; None values without a report row)."""
    if row is None:
        return {key: (name if key == "module" else None) for key in REPORT_COLUMNS}
    return {
        "layer": row.layer,
        "module": name,
        "loss": row.loss,
        "samples": row.tokens,
        "damp": row.damp,
        "fallback": row.fallback_reason or row.fallback,
        "seconds": row.seconds,
    }


def log_rows(modules: Iterable[str], report: Sequence[ModuleReport]) -> list[dict[str, Any]]:
    """One file row per module name, in ``modules`` order (the run's module order)."""
    by_name = {row.module: row for row in report}
    return [log_row(name, by_name.get(name)) for name in modules]
