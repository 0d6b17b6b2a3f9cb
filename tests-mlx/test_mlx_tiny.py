"""lowbit's MLX export read by MLX itself: a tiny llama (built here) quantized GPTQ and AWQ by ``lowbit
quantize``, converted with ``lowbit convert --to mlx``, then ``mx.load`` + ``mx.dequantize`` per module against
lowbit's dequantized weights, and ``mlx_lm.load`` + a forward against lowbit's logits. Run by ``nox -s mlx``."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import dequantization_check, lowbit, lowbit_logits, mlx_logits

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "lowbit" / "tests"))

from tiny_model import save_tiny_llama

#: Logits of mlx_lm vs lowbit on the float32 tiny model: the only difference is the float16 bias rounding
#: (asymmetric AWQ zeros) and float32 summation order, far below 1% of the logits' range.
LOGIT_TOLERANCE = 0.01


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_llama(tmp_path_factory.mktemp("tiny") / "llama", layers=2)


@pytest.mark.parametrize("method", ["gptq", "awq"])
def test_mlx_reads_the_export_of_a_tiny_model(method: str, tiny: Path, tmp_path: Path) -> None:
    quantized, mlx_dir = tmp_path / method, tmp_path / f"{method}-mlx"
    lowbit("quantize", str(tiny), "--method", method, "--group-size", "32", "--samples", "8", "--length", "64",
           "--out", str(quantized), "--quiet")  # fmt: skip
    printed = lowbit("convert", str(quantized), "--to", "mlx", "--out", str(mlx_dir))
    assert "14 transcoded exactly to MLX affine" in printed
    check = dequantization_check(quantized, mlx_dir)
    print(f"{method}: mx.dequantize vs lowbit over {check['modules']} modules: {check}")
    assert check["modules"] == 14

    windows = [list(np.random.default_rng(0).integers(0, 320, 48))]
    theirs, ours = mlx_logits(mlx_dir, windows)[0], lowbit_logits(quantized, windows)[0]
    difference = float(np.abs(theirs - ours).max())
    print(f"{method}: mlx_lm vs lowbit logits: max |difference| {difference:.3g} (logit range {np.ptp(ours):.3g})")
    assert difference <= LOGIT_TOLERANCE * float(np.ptp(ours))
    assert np.array_equal(theirs.argmax(-1), ours.argmax(-1))
