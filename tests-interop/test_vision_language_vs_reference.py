"""A vision-language checkpoint lowbit writes -> GPT-QModel 7.7.0 loads it as the VLM class, same weights, and
its image+text logits agree with qhf's (a tiny LLaVA with its processor; the vision tower dense)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from cases import assert_logits_close
from lowbit_side import lowbit_weights
from reference import load_with_reference, quantized_modules, reference_dense

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "qhf" / "tests"))


@pytest.mark.parametrize(("method", "fmt"), [("gptq", "gptq"), ("awq", "gemm")])
def test_reference_loads_lowbit_vision_language_checkpoint(tmp_path: Path, method: str, fmt: str) -> None:
    import qhf
    from PIL import Image
    from qhf.corpus import bundled_docs
    from qhf.tokenizer import token_blocks
    from tiny_models import build_tokenizer
    from tiny_vision_models import llava, save_llava_processor, save_vision_model
    from transformers import AutoProcessor

    src = save_vision_model(tmp_path / "src", llava(), build_tokenizer())
    save_llava_processor(src, build_tokenizer())  # GPT-QModel loads a VLM's processor with it
    qm = qhf.load(src, {"method": method, "bits": 4, "group_size": 32, "format": fmt})
    qm.quantize(token_blocks(qm.tokenizer, bundled_docs("calibration").texts, count=4, length=32))
    out = tmp_path / "out"
    qm.save(out, dtype="float16")

    ref = load_with_reference(out, fmt)
    assert type(ref.model).__name__ == "LlavaForConditionalGeneration"
    modules = quantized_modules(ref)
    assert sorted(modules) == sorted(qm.results or {}) and len(modules) == 14
    for name, weight in lowbit_weights(out).items():
        ours = torch.from_numpy(weight.dequantize()).to(torch.float16)
        assert torch.equal(reference_dense(modules[name]).to(torch.float16), ours), name

    processor = AutoProcessor.from_pretrained(out)
    pixels = (torch.rand(28, 28, 3, generator=torch.Generator().manual_seed(0)) * 255).to(torch.uint8).numpy()
    inputs = processor(text="def <image> fibonacci", images=Image.fromarray(pixels), return_tensors="pt")
    ids, image = inputs["input_ids"], inputs["pixel_values"]
    loaded = qhf.load_quantized(out)
    with torch.no_grad():
        theirs = ref.model(input_ids=ids, pixel_values=image.half(), use_cache=False).logits.float()
        ours = loaded(input_ids=ids, pixel_values=image, use_cache=False).logits.float()
    assert_logits_close(ours, theirs)
