"""Optional session: bit-for-bit against bitsandbytes on CPU (runs where bitsandbytes is installed)."""

from __future__ import annotations

import numpy as np
import pytest
from qformats.layouts.bnb import BnB4Weight, BnB8Weight, pack_bnb4, unpack_bnb4

torch = pytest.importorskip("torch")
F = pytest.importorskip("bitsandbytes.functional", reason="run by `nox -s bitsandbytes`")


@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
@pytest.mark.parametrize(("blocksize", "shape"), [(32, (7, 33)), (64, (8, 64)), (256, (16, 576))])
def test_plain_4bit_is_bit_exact(quant_type: str, blocksize: int, shape: tuple[int, int]) -> None:
    w = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    w[0, :5] = 0
    packed, state = F.quantize_4bit(torch.from_numpy(w), blocksize=blocksize, quant_type=quant_type,
                                    compress_statistics=False, quant_storage=torch.uint8)  # fmt: skip
    ours = BnB4Weight.quantize(w, quant_type=quant_type, blocksize=blocksize, compress_statistics=False)
    assert np.array_equal(ours.packed, packed.numpy()) and np.array_equal(ours.absmax, state.absmax.numpy())
    assert np.array_equal(ours.dequantize(), F.dequantize_4bit(packed, state).numpy())
    theirs = {k: v.numpy() for k, v in state.as_dict(packed=True).items()}
    assert {f"weight.{k}": v for k, v in theirs.items()}.keys() == pack_bnb4(ours, naming="hf").keys() - {"weight"}
    for key, value in theirs.items():
        assert np.array_equal(pack_bnb4(ours, naming="hf")[f"weight.{key}"], value), key


@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
def test_bitsandbytes_nested_files_read_exactly(quant_type: str) -> None:
    w = np.random.default_rng(1).standard_normal((64, 576)).astype(np.float32)
    packed, state = F.quantize_4bit(torch.from_numpy(w), blocksize=64, quant_type=quant_type,
                                    compress_statistics=True, quant_storage=torch.uint8)  # fmt: skip
    tensors = {"weight": packed.numpy(), **{f"weight.{k}": v.numpy() for k, v in state.as_dict(packed=True).items()}}
    assert np.array_equal(unpack_bnb4(tensors).dequantize(), F.dequantize_4bit(packed, state).numpy())
    ours = BnB4Weight.quantize(w, quant_type=quant_type, blocksize=64, compress_statistics=True)
    # the nested statistics agree except where bitsandbytes' search takes a neighbouring dynamic-map entry
    theirs = (F.dequantize_blockwise(state.absmax, state.state2) + state.offset).numpy()
    assert np.allclose(ours.block_absmax(), theirs, rtol=0.02)


def test_int8_is_bit_exact() -> None:
    w = np.random.default_rng(2).standard_normal((9, 70)).astype(np.float32)
    q, scb, _ = F.int8_vectorwise_quant(torch.from_numpy(w).half(), threshold=0.0)
    ours = BnB8Weight.quantize(w)
    assert np.array_equal(ours.weight, q.numpy()) and np.array_equal(ours.scb, scb.numpy())
    assert np.array_equal(ours.dequantize(), F.int8_vectorwise_dequant(q, scb).numpy())
