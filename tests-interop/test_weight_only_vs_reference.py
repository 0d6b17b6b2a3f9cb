"""GPT-QModel 7.7.0 loads lowbit's weight-only outputs (GGUF q4_k_m mixture, FP8) and its logits match lowbit's.

lowbit quantizes the tiny Llama, saves float16, and loads the directory with qhf (qkernels modules, float32).
GPT-QModel then loads the same directory with ``GPTQModel.load`` on CPU (float16) and runs the probe. Both
read the q4_k_m mixture's per-module types from the config's ``dynamic`` overrides (Q6_K for the last
layer's ``v_proj`` / ``down_proj``), and FP8 ``weight`` tensors stored as ``F8_E4M3``. bitsandbytes NF4 needs
the ``bitsandbytes`` package (>= 0.49.3), which this session does not install: GPT-QModel refuses with the
error asserted below.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from cases import assert_logits_close
from lowbit_side import lowbit_logits
from tiny_llama import PROBE


def _save(source: Path, out: Path, config: dict[str, object]) -> Path:
    import qhf

    qm = qhf.load(source, config)
    qm.quantize()
    qm.save(out, dtype="float16")
    return out


def _reference(path: Path) -> tuple[torch.Tensor, dict[str, str]]:
    """GPT-QModel's logits and, per quantized linear, its kernel class (with the GGUF type when it has one)."""
    from gptqmodel import GPTQModel

    model = GPTQModel.load(str(path), device="cpu", dtype=torch.float16)
    kinds = {
        name: f"{type(m).__name__} {getattr(m, 'gguf_tensor_qtype', '')}".strip()
        for name, m in model.model.named_modules()
        if name.endswith("_proj")
    }
    with torch.no_grad():
        return model.model(input_ids=PROBE, use_cache=False).logits.float(), kinds


def test_gguf_q4_k_m_mixture_loads_in_the_reference(tmp_path: Path, tiny_source: Path) -> None:
    out = _save(tiny_source, tmp_path / "q4_k_m", {"method": "gguf", "format": "q4_k_m"})
    logits, kinds = _reference(out)
    upgraded = {n for n, kind in kinds.items() if kind == "GGUFTorchLinear Q6_K"}
    assert upgraded == {"model.layers.1.self_attn.v_proj", "model.layers.1.mlp.down_proj"}
    assert set(kinds.values()) == {"GGUFTorchLinear Q4_K", "GGUFTorchLinear Q6_K"} and len(kinds) == 14
    assert_logits_close(lowbit_logits(out), logits)


def test_fp8_loads_in_the_reference(tmp_path: Path, tiny_source: Path) -> None:
    out = _save(tiny_source, tmp_path / "fp8", {"method": "fp8"})
    logits, kinds = _reference(out)
    assert set(kinds.values()) == {"TorchFP8Linear"} and len(kinds) == 14
    assert_logits_close(lowbit_logits(out), logits)


def test_nf4_needs_bitsandbytes_in_the_reference(tmp_path: Path, tiny_source: Path) -> None:
    out = _save(tiny_source, tmp_path / "nf4", {"method": "bitsandbytes", "format": "nf4"})
    assert lowbit_logits(out).isfinite().all()
    with pytest.raises(ValueError, match=r"bitsandbytes is not installed or is too old\. Install a recent 0\.49\.x"):
        _reference(out)
