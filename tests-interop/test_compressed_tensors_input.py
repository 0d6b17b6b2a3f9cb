"""compressed-tensors ``pack-quantized`` (llm-compressor's W4A16 format) as an input: lowbit reads it
bit-exactly against compressed-tensors' own unpacker, its packer words match ours, and lowbit re-saves
it as GPTQ v2 losslessly (read back by lowbit and by GPT-QModel)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from cases import as_dtype, assert_logits_close
from lowbit_side import lowbit_logits, lowbit_weights
from peer_compressed_tensors import decompress_with_compressed_tensors, scheme_of, write_with_compressed_tensors
from qformats.checkpoint import write_checkpoint
from qformats.layouts.compressed_tensors.bitstream import pack_dense
from qformats.layouts.compressed_tensors.directory import open_compressed_tensors
from qformats.layouts.registry import get_layout
from qformats.transcode import transcode_weight
from reference import load_with_reference, quantized_modules, reference_dense
from tiny_llama import PROBE


@pytest.mark.parametrize("bits", range(1, 9))
def test_packer_words_match_compressed_tensors(bits: int) -> None:
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32

    offset = 1 << (bits - 1)
    signed = torch.randint(-offset, offset, (6, 70), generator=torch.Generator().manual_seed(bits), dtype=torch.int8)
    theirs_rows = pack_to_int32(signed, bits)  # along the input axis
    theirs_cols = pack_to_int32(signed, bits, packed_dim=0)  # how zero points are packed
    codes = (signed.to(torch.int16) + offset).to(torch.uint8).numpy()
    assert np.array_equal(pack_dense(codes, bits), theirs_rows.numpy())
    assert np.array_equal(pack_dense(np.ascontiguousarray(codes.T), bits).T, theirs_cols.numpy())


@pytest.mark.parametrize("sym", [True, False], ids=["sym", "asym"])
def test_lowbit_reads_compressed_tensors_checkpoint(tmp_path: Path, tiny_source: Path, sym: bool) -> None:
    src = write_with_compressed_tensors(tiny_source, tmp_path / "ct", bits=4, sym=sym)
    raw = json.loads((src / "config.json").read_text())["quantization_config"]
    assert raw["format"] == "pack-quantized" and raw["quant_method"] == "compressed-tensors"
    scheme = scheme_of(raw)

    ckpt = open_compressed_tensors(src)
    assert len(ckpt.modules()) == 14 and "lm_head.weight" in ckpt.dense_names()
    layout = get_layout("pack-quantized")
    dense_weights: dict[str, torch.Tensor] = {}
    for name in ckpt.modules():
        weight = ckpt.logical_weight(name)
        assert weight.sym is sym and weight.bits == 4 and weight.group_size == 32
        theirs = decompress_with_compressed_tensors(src, name, scheme)
        assert theirs.dtype == torch.bfloat16
        ours = as_dtype(weight.dequantize(), theirs.dtype)
        assert torch.equal(ours, theirs), f"{name}: max diff {float((ours.float() - theirs.float()).abs().max())}"
        dense_weights[f"{name}.weight"] = theirs.float()
        # our packer reproduces the stored words exactly
        stored = ckpt.module_tensors(name)
        for key, arr in layout.pack(weight).items():
            if key != "weight_scale":
                assert np.array_equal(arr, stored[key]), f"{name}.{key}"

    # lowbit re-saves as GPTQ v2 (bf16 scales are exact in float32; the file keeps float32 scales)
    out = tmp_path / "as-gptq_v2"
    tensors: dict[str, np.ndarray] = {}
    written = {}
    for name in ckpt.modules():
        result = transcode_weight(ckpt.logical_weight(name), "gptq_v2")
        written[name] = result.weight
        tensors.update({f"{name}.{k}": v for k, v in result.tensors.items()})
    dtypes = {}
    for name in ckpt.dense_names():
        tensors[name] = ckpt.load(name)
        dtypes[name] = "BF16"
    quant = {"bits": 4, "group_size": 32, "sym": sym, "desc_act": False, "method": "gptq", "quant_method": "gptq"}
    quant.update({"format": "gptq_v2", "checkpoint_format": "gptq_v2", "pack_dtype": "int32"})
    model_config = json.loads((src / "config.json").read_text())
    write_checkpoint(out, tensors, quantize_config=quant, model_config=model_config, dtypes=dtypes)
    for extra in ("tokenizer.json", "tokenizer_config.json"):
        (out / extra).write_bytes((src / extra).read_bytes())
    again = lowbit_weights(out)
    for name, weight in written.items():
        assert again[name].equals(weight), name
        assert np.array_equal(again[name].dequantize(), ckpt.logical_weight(name).dequantize()), name

    # logits: the dense model holding compressed-tensors' dequantized weights vs lowbit's and the reference's
    from transformers import AutoModelForCausalLM

    dense = AutoModelForCausalLM.from_pretrained(tiny_source, dtype=torch.float32).eval()
    state = {n: torch.from_numpy(ckpt.load(n)) for n in ckpt.dense_names()}
    missing, unexpected = dense.load_state_dict({**state, **dense_weights}, strict=False)
    assert not unexpected and not [m for m in missing if "rotary" not in m]
    with torch.no_grad():
        expected = dense(input_ids=PROBE, use_cache=False).logits.float()
    assert_logits_close(lowbit_logits(out), expected)
    ref = load_with_reference(out, "gptq_v2")
    for name, module in quantized_modules(ref).items():
        theirs = reference_dense(module)
        assert torch.equal(theirs, as_dtype(again[name].dequantize(), theirs.dtype)), name
