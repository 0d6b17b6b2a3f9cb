"""lowbit writes -> GPT-QModel 7.7.0 loads: identical dequantized weights, logits within tolerance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from cases import CASES, IDS, as_dtype, assert_logits_close
from lowbit_side import lowbit_logits, lowbit_weights, quantize_with_lowbit
from reference import load_with_reference, quantized_modules, reference_dense, reference_logits

KERNELS = {"gemm": "AwqTorchLinear"}


@pytest.mark.parametrize(("fmt", "bits", "sym", "method"), CASES, ids=IDS)
def test_reference_loads_lowbit_checkpoint(
    tmp_path: Path, tiny_source: Path, fmt: str, bits: int, sym: bool, method: str
) -> None:
    out = tmp_path / f"lowbit-{fmt}"
    qm = quantize_with_lowbit(tiny_source, out, method=method, fmt=fmt, bits=bits, sym=sym)
    written = json.loads((out / "quantize_config.json").read_text())
    assert (written["format"], written["bits"]) == (fmt, bits)

    ref = load_with_reference(out, fmt)
    modules = quantized_modules(ref)
    assert sorted(modules) == sorted(qm.results) and len(modules) == 14
    assert {type(m).__name__ for m in modules.values()} == {KERNELS.get(fmt, "TorchLinear")}
    from_file = lowbit_weights(out)
    for name, module in modules.items():
        in_memory = qm.results[name].weight
        assert from_file[name].equals(in_memory), name
        theirs = reference_dense(module)
        ours = as_dtype(in_memory.dequantize(), theirs.dtype)
        assert torch.equal(theirs, ours), f"{name}: max diff {float((theirs.float() - ours.float()).abs().max())}"

    assert_logits_close(lowbit_logits(out), reference_logits(ref))
