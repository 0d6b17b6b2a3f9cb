"""``inspect`` of weight-only directories (FP8, bitsandbytes, GGUF): per-module stored types, dims, bytes, rules."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from qformats.checkpoint import write_checkpoint
from qformats.inspect import format_text, inspect
from qformats.layouts.bnb import BnB4Weight, pack_bnb4
from qformats.layouts.fp8 import FP8Weight, pack_fp8
from qformats.layouts.gguf import GGUFWeight

GGUF_CONFIG = {
    "bits": 4, "method": "gguf", "quant_method": "gguf", "format": "q_k_m", "checkpoint_format": "q_k_m",
    "dynamic": {r"+:^model\.layers\.1\.mlp\.down_proj$": {"bits": 6, "format": "q_k"}},
}  # fmt: skip
MODEL = {"model_type": "llama", "hidden_size": 64}


def _weights(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {f"model.layers.{i}.mlp.down_proj": rng.standard_normal((32, 300)).astype(np.float32) for i in range(2)}


def test_gguf_mixture_directory_reports_each_module_type(tmp_path: Path) -> None:
    weights = _weights(np.random.default_rng(0))
    qtypes = {"model.layers.0.mlp.down_proj": "Q4_K", "model.layers.1.mlp.down_proj": "Q6_K"}
    tensors = {f"{n}.qweight": GGUFWeight.quantize(w, qtypes[n]).qweight for n, w in weights.items()}
    tensors["model.norm.weight"] = np.ones(64, np.float32)
    write_checkpoint(tmp_path, tensors, quantize_config=GGUF_CONFIG, model_config=MODEL, validate=False)
    summary = inspect(tmp_path)
    assert (summary.method, summary.format, summary.group_size, summary.violation_count) == ("gguf", "q_k_m", -1, 0)
    got = {m.name: (m.qtype, m.bits, m.out_features, m.in_features, m.nbytes) for m in summary.modules}
    # 300 columns: two 256-element blocks per row (the width is padded to whole blocks)
    assert got == {
        "model.layers.0.mlp.down_proj": ("Q4_K", 4, 32, 512, 32 * 2 * 144),
        "model.layers.1.mlp.down_proj": ("Q6_K", 6, 32, 512, 32 * 2 * 210),
    }
    assert summary.types == {"Q4_K": [1, 32 * 2 * 144], "Q6_K": [1, 32 * 2 * 210]}
    assert summary.dense_tensors == 1
    text = format_text(summary)
    assert "types        Q4_K 1 modules 9216 bytes, Q6_K 1 modules 13440 bytes" in text
    assert "model.layers.1.mlp.down_proj  [32 x 512] gguf Q6_K: qweight [32, 420] uint8" in text


def test_gguf_row_bytes_that_are_not_whole_blocks_are_a_violation(tmp_path: Path) -> None:
    tensors = {"model.layers.0.mlp.down_proj.qweight": np.zeros((32, 150), np.uint8)}
    write_checkpoint(tmp_path, tensors, quantize_config=GGUF_CONFIG, model_config=MODEL, validate=False)
    (module,) = inspect(tmp_path).modules
    assert module.violations == ["qweight: expected [out, whole Q4_K blocks of 144 bytes], found [32, 150]"]


def test_fp8_and_nf4_directories_report_dims_and_scale_rules(tmp_path: Path) -> None:
    weights = _weights(np.random.default_rng(1))
    fp8 = {}
    for name, w in weights.items():
        fp8.update({f"{name}.{k}": v for k, v in pack_fp8(FP8Weight.quantize(w, method="row")).items()})
    fp8["model.layers.1.mlp.down_proj.weight_scale_inv"] = np.ones(31, np.float32)  # one row short
    config = {"bits": 8, "method": "fp8", "format": "float8_e4m3fn", "weight_scale_method": "row"}
    write_checkpoint(tmp_path / "fp8", fp8, quantize_config=config, model_config=MODEL, validate=False)
    summary = inspect(tmp_path / "fp8")
    assert [(m.qtype, m.out_features, m.in_features) for m in summary.modules] == [("float8_e4m3fn row", 32, 300)] * 2
    assert summary.modules[1].violations == ["weight_scale_inv: expected [32] for row scales, found [31]"]

    nf4 = {}
    for name, w in weights.items():
        packed = pack_bnb4(BnB4Weight.quantize(w, quant_type="nf4", blocksize=64))
        nf4.update({f"{name}.{k}": v for k, v in packed.items()})
    config = {"bits": 4, "method": "bitsandbytes", "format": "nf4", "block_size": 64}
    write_checkpoint(tmp_path / "nf4", nf4, quantize_config=config, model_config=MODEL, validate=False)
    summary = inspect(tmp_path / "nf4")
    assert summary.violation_count == 0
    assert [(m.qtype, m.out_features, m.in_features) for m in summary.modules] == [("nf4 block 64", 32, 300)] * 2


def test_gguf_directory_without_dynamic_rules(tmp_path: Path) -> None:
    w = np.random.default_rng(2).standard_normal((32, 64)).astype(np.float32)
    tensors = {"model.layers.0.mlp.up_proj.qweight": GGUFWeight.quantize(w, "Q4_0").qweight}
    config = {"bits": 4, "method": "gguf", "format": "q_0"}
    write_checkpoint(tmp_path, tensors, quantize_config=config, model_config=MODEL, validate=False)
    (module,) = inspect(tmp_path).modules
    assert (module.qtype, module.out_features, module.in_features, module.violations) == ("Q4_0", 32, 64, [])
