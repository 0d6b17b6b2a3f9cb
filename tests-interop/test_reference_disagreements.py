"""Where the reference's files mean something their field-by-field reading does not (docs/interoperability.md).

GPT-QModel writes asymmetric ``gptq`` (v1) zeros by subtracting a constant word from the true-zero words.
A group whose weights are all positive has true zero 0; its v1 field becomes 2**bits - 1 and borrows one
from the next field of the word. The reference's loader adds the word back. lowbit's checkpoint reader
does the same for checkpoints whose ``meta.quantizer`` names GPT-QModel.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from cases import as_dtype
from lowbit_side import lowbit_weights
from qformats.checkpoint import open_checkpoint
from qformats.layouts.registry import get_layout
from reference import load_with_reference, quantize_with_reference, quantized_modules, reference_dense

MODULE = "model.layers.0.mlp.up_proj"


def test_v1_zero_borrow_is_read_as_the_reference_reads_it(tmp_path: Path, positive_source: Path) -> None:
    src = quantize_with_reference(positive_source, tmp_path / "ref-v1-asym", fmt="gptq", bits=4, sym=False)
    ck = open_checkpoint(src)
    entry = next(e for e in ck.modules() if e.prefix == MODULE)
    words = ck.module_tensors(entry)["qzeros"].view(np.uint32)
    fields = np.stack([(words >> np.uint32(4 * j)) & np.uint32(15) for j in range(8)], axis=-1)
    assert int(np.count_nonzero(fields == 15)) > 0  # true zero 0 stored as -1: the condition under test

    ref = load_with_reference(src, "gptq")
    ours = lowbit_weights(src)
    for name, module in quantized_modules(ref).items():
        theirs = reference_dense(module)
        assert torch.equal(as_dtype(ours[name].dequantize(), theirs.dtype), theirs), name
    assert ours[MODULE].meta["v1_reference_borrow_fields"] == int(np.count_nonzero(fields == 15))
    assert int(ours[MODULE].zeros.min()) == 0 and int(ours[MODULE].zeros.max()) <= 15
    # The field-by-field reading (zero = field + 1) disagrees: 16 where the reference has 0, and the
    # borrowed neighbours off by one.
    naive = get_layout("gptq").unpack(ck.module_tensors(entry), entry.meta)
    assert int(naive.zeros.max()) == 16
    differs = naive.zeros != ours[MODULE].zeros
    assert int(np.count_nonzero(differs)) > int(np.count_nonzero(fields == 15))
