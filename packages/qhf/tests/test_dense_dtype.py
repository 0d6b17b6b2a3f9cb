"""Dense (non-quantized) tensors are written in the source's dtype, or the one asked for, and config.json says so."""

from __future__ import annotations

import json

import pytest
import qhf
import torch
from qhf.errors import QHFError
from qhf.save.dense_dtype import resolve_dense_dtype
from safetensors import safe_open
from tiny_models import save_tiny_model

RTN = {"method": "rtn", "bits": 4, "group_size": 32}


def _saved_dtypes(directory) -> dict[str, torch.dtype]:
    dtypes = {}
    for shard in directory.glob("*.safetensors"):
        with safe_open(str(shard), "pt") as handle:
            for name in handle.keys():
                dtypes[name] = handle.get_tensor(name).dtype
    return dtypes


@pytest.fixture(scope="module")
def bf16_dir(tmp_path_factory, tokenizer):
    return save_tiny_model(tmp_path_factory.mktemp("bf16"), "llama", tokenizer=tokenizer, dtype=torch.bfloat16)


def test_auto_keeps_the_dtype_the_source_config_declares(tmp_path, bf16_dir) -> None:
    qm = qhf.load(bf16_dir, RTN)
    assert resolve_dense_dtype(qm.source) == torch.bfloat16
    qm.quantize()
    summary = qm.save(tmp_path / "q")
    assert summary.verified and summary.dense_dtype == "bfloat16"
    assert json.loads((tmp_path / "q" / "config.json").read_text())["dtype"] == "bfloat16"
    dtypes = _saved_dtypes(tmp_path / "q")
    assert dtypes["model.embed_tokens.weight"] == torch.bfloat16
    assert dtypes["model.layers.0.input_layernorm.weight"] == torch.bfloat16
    assert dtypes["model.layers.0.self_attn.q_proj.scales"] == torch.float16  # the layout's dtype, untouched


def test_float16_asked_for_a_float32_source(tmp_path, tiny_dirs) -> None:
    qm = qhf.load(tiny_dirs("llama"), RTN)
    assert resolve_dense_dtype(qm.source) == torch.float32  # its config says float32
    qm.quantize()
    summary = qm.save(tmp_path / "q", dtype="float16")
    assert summary.verified, summary.verification
    assert json.loads((tmp_path / "q" / "config.json").read_text())["dtype"] == "float16"
    dtypes = _saved_dtypes(tmp_path / "q")
    floating = {n: d for n, d in dtypes.items() if d.is_floating_point}
    dense = {n: d for n, d in floating.items() if not n.endswith(".scales")}
    assert dense and set(dense.values()) == {torch.float16}
    assert {d for n, d in dtypes.items() if n.endswith(".qweight")} == {torch.int32}
    # the in-memory model was rounded to what was written: the reloaded model gives its logits
    lm = qhf.load_quantized(tmp_path / "q")
    ids = torch.tensor([[1, *range(5, 30)]])
    with torch.no_grad():
        assert torch.allclose(lm(input_ids=ids).logits, qm.model(input_ids=ids).logits, atol=1e-4)


def test_unknown_dtype_is_refused(tiny_dirs) -> None:
    qm = qhf.load(tiny_dirs("llama"), RTN)
    with pytest.raises(QHFError, match=r"dtype 'float8'.*auto, float16, bfloat16, float32"):
        resolve_dense_dtype(qm.source, "float8")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_round_in_place_by_chunks_equals_the_whole_tensor_rounding(
    dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    import qhf.save.dense_dtype as dd

    monkeypatch.setattr(dd, "ROUND_CHUNK", 5)  # many chunks, the last one partial
    value = torch.randn(7, 9, generator=torch.Generator().manual_seed(1)) * 1e3
    want = value.to(dtype).to(value.dtype)
    dd.round_in_place(value, dtype)
    assert torch.equal(value, want)
    strided = torch.randn(9, 7, generator=torch.Generator().manual_seed(2)).T  # not contiguous: one conversion
    want = strided.to(dtype).to(strided.dtype)
    dd.round_in_place(strided, dtype)
    assert torch.equal(strided, want)
