"""PNG plots for ``quantize --plot`` and ``inspect --plot`` (matplotlib, the optional extra ``plot``).

matplotlib is imported only here and only when a plot is asked for; without it the command fails with
:class:`~lowbit.errors.MissingExtraError` before doing any work (checked by :func:`require_matplotlib`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MissingExtraError, UsageError

if TYPE_CHECKING:
    from qlooper.report import ModuleReport

INSTALL_HINT = "pip install 'lowbit[plot]' (or pip install matplotlib)"


def require_matplotlib(flag: str) -> None:
    """Fail early, naming ``flag``, when matplotlib is not importable."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise MissingExtraError(f"{flag} needs matplotlib, which is not installed: {INSTALL_HINT}") from None


def check_png_path(path: str, flag: str) -> Path:
    """``path`` as a Path ending in ``.png`` whose directory exists."""
    target = Path(path)
    if target.suffix.lower() != ".png":
        raise UsageError(f"{flag}: expected a .png file name, found {path!r}")
    if not target.parent.exists():
        raise UsageError(f"{flag}: directory {str(target.parent)!r} does not exist")
    return target


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_module_losses(rows: Sequence[ModuleReport], path: Path, title: str) -> Path:
    """Per-module quantization loss (log scale) in solve order, one colour per projection, layer ticks.

    ``rows``: the run's qlooper ``ModuleReport`` rows."""
    plt = _pyplot()
    points = [(i, r.module, r.loss) for i, r in enumerate(rows) if r.loss is not None]
    if not points:
        raise UsageError("--plot: the run reported no loss values to draw")
    kinds = sorted({module.rsplit(".", 1)[-1] for _, module, _ in points})
    fig, ax = plt.subplots(figsize=(11, 4.5))
    for kind in kinds:
        xs = [i for i, module, _ in points if module.endswith(kind)]
        ys = [max(float(loss), 1e-12) for _, module, loss in points if module.endswith(kind)]
        ax.plot(xs, ys, marker=".", linestyle="none", label=kind)
    starts: dict[Any, int] = {}
    for i, r in enumerate(rows):
        starts.setdefault(r.layer, i)
    ax.set_xticks(list(starts.values())[:: max(1, len(starts) // 15)])
    ax.set_xticklabels([str(k) for k in list(starts)[:: max(1, len(starts) // 15)]])
    ax.set_yscale("log")
    ax.set_xlabel("decoder layer (modules in solve order)")
    ax.set_ylabel("quantization loss (reported by the method)")
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_code_histograms(modules: Sequence[tuple[str, np.ndarray, np.ndarray, int]], path: Path, title: str) -> Path:
    """One row per module: histogram of its integer codes (``2**bits`` bins) and of its scales.

    ``modules``: ``(name, codes [out, in] uint8, scales [groups, out] float, bits)`` tuples.
    """
    plt = _pyplot()
    if not modules:
        raise UsageError("--plot: the checkpoint has no quantized module to draw")
    fig, axes = plt.subplots(len(modules), 2, figsize=(10, 2.2 * len(modules)), squeeze=False)
    for row, (name, codes, scales, bits) in enumerate(modules):
        levels = 1 << bits
        counts = np.bincount(codes.reshape(-1).astype(np.int64), minlength=levels)
        axes[row][0].bar(np.arange(levels), counts, width=0.9)
        axes[row][0].set_title(f"{name}: codes ({bits}-bit)", fontsize=8)
        axes[row][1].hist(np.asarray(scales, dtype=np.float64).reshape(-1), bins=60)
        axes[row][1].set_title(f"{name}: scales", fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
