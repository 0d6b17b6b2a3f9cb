"""GPT-QModel 7.7.0 quantizes and saves -> lowbit reads (identical dequantized weights, logits close)
-> lowbit re-saves in another layout losslessly, and the reference loads that too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from cases import CASES, IDS, RESAVE_AS, as_dtype, assert_logits_close
from lowbit_side import lowbit_logits, lowbit_weights, resave
from reference import (
    load_with_reference,
    quantize_with_reference,
    quantized_modules,
    reference_dense,
    reference_logits,
)


@pytest.mark.parametrize(("fmt", "bits", "sym", "method"), CASES, ids=IDS)
def test_lowbit_reads_and_resaves_reference_checkpoint(
    tmp_path: Path, tiny_source: Path, fmt: str, bits: int, sym: bool, method: str
) -> None:
    src = quantize_with_reference(tiny_source, tmp_path / f"ref-{fmt}", fmt=fmt, bits=bits, sym=sym)
    cfg = json.loads((src / "quantize_config.json").read_text())
    assert cfg["format"] == fmt and cfg["meta"]["quantizer"][0].startswith("gptqmodel:7.7.0")

    ref = load_with_reference(src, fmt)
    ref_dense = {name: reference_dense(m) for name, m in quantized_modules(ref).items()}
    ours = lowbit_weights(src)
    assert sorted(ours) == sorted(ref_dense) and len(ours) == 14
    for name, theirs in ref_dense.items():
        assert ours[name].bits == bits and ours[name].sym == sym, name
        mine = as_dtype(ours[name].dequantize(), theirs.dtype)
        assert torch.equal(mine, theirs), f"{name}: max diff {float((mine.float() - theirs.float()).abs().max())}"
    ref_logits = reference_logits(ref)
    assert_logits_close(lowbit_logits(src), ref_logits)

    # lowbit re-saves in another layout: the logical weights are bit-identical, both readers agree.
    target = RESAVE_AS[fmt]
    out = tmp_path / f"resaved-{target}"
    resave(src, out, target)
    assert json.loads((out / "quantize_config.json").read_text())["format"] == target
    again = lowbit_weights(out)
    assert sorted(again) == sorted(ours)
    for name, weight in ours.items():
        assert again[name].equals(weight), name
    resaved_ref = load_with_reference(out, target)
    for name, module in quantized_modules(resaved_ref).items():
        assert torch.equal(reference_dense(module), ref_dense[name]), f"{name} after re-save as {target}"
    assert_logits_close(lowbit_logits(out), ref_logits)
    assert_logits_close(reference_logits(resaved_ref), ref_logits, rel=1e-3)
