"""Vision-language models: the language stack quantized, the vision tower dense, image+text after reload.

Tiny Qwen2.5-VL, Gemma 3 (with vision), Llama 4 and LLaVA models (:mod:`tiny_vision_models`) are quantized from
text alone with GPTQ and AWQ (RTN once), saved (verified), and reloaded with ``qhf.load_quantized`` as their
transformers class; an image+text forward of the reloaded model equals the in-memory quantized model's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import qhf
import torch
from qhf.architectures.multimodal import TEXT_ONLY_NOTE, head_tied, model_class
from qhf.checkpoint_reader import read_checkpoint_config
from qhf.corpus import bundled_docs
from qhf.errors import UnsupportedArchitectureError
from qhf.kv_cache_off import kv_cache_off
from qhf.source.skeleton import meta_skeleton
from qhf.tokenizer import token_blocks
from safetensors import safe_open
from tiny_vision_models import FAMILIES, IMAGE, image_text_inputs, llava, save_llava_processor, save_vision_model

# family -> (transformers class, language model, its decoder layers, subtrees kept dense, quantized modules)
EXPECTED: dict[str, tuple[str, str, str, list[str], int]] = {
    "qwen2_vl": ("Qwen2VLForConditionalGeneration", "model.language_model", "layers", ["model.visual"], 14),
    "qwen2_5_vl": ("Qwen2_5_VLForConditionalGeneration", "model.language_model", "layers", ["model.visual"], 14),
    "qwen3_vl": ("Qwen3VLForConditionalGeneration", "model.language_model", "layers", ["model.visual"], 14),
    "gemma3": (
        "Gemma3ForConditionalGeneration",
        "model.language_model",
        "layers",
        ["model.vision_tower", "model.multi_modal_projector"],
        14,
    ),
    # 4 attention linears, 4 experts x 3, a shared expert's 3, per layer; the router stays dense
    "llama4": (
        "Llama4ForConditionalGeneration",
        "language_model",
        "model.layers",
        ["vision_model", "multi_modal_projector"],
        38,
    ),
    "llava": (
        "LlavaForConditionalGeneration",
        "model.language_model",
        "layers",
        ["model.vision_tower", "model.multi_modal_projector"],
        14,
    ),
    "mistral3": (
        "Mistral3ForConditionalGeneration",
        "model.language_model",
        "layers",
        ["model.vision_tower", "model.multi_modal_projector"],
        14,
    ),
}


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory, tokenizer: Any) -> Any:
    """family -> directory of its saved tiny model (built once per module)."""
    built: dict[str, Path] = {}

    def get(family: str) -> Path:
        if family not in built:
            built[family] = save_vision_model(tmp_path_factory.mktemp(family), FAMILIES[family](), tokenizer)
        return built[family]

    return get


def _calibration(tokenizer: Any) -> list[list[int]]:
    return token_blocks(tokenizer, bundled_docs("calibration").texts, count=4, length=32)


def _tensors(directory: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for file in sorted(directory.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as handle:
            out.update({name: handle.get_tensor(name) for name in handle.keys()})
    return out


def _logits(model: Any, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        return model(**inputs, use_cache=False).logits


@pytest.mark.parametrize("method", ["gptq", "awq"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_language_stack_quantized_and_image_text_forward_after_reload(
    family: str, method: str, sources: Any, tokenizer: Any, tmp_path: Path
) -> None:
    cls, language_model, inside, dense, count = EXPECTED[family]
    layers = f"{language_model}.{inside}"
    src = sources(family)
    qm = qhf.load(src, {"method": method, "bits": 4, "group_size": 32})
    assert qm.source.definition.layers_path == layers
    summary = qm.quantize(_calibration(tokenizer))
    assert summary.multimodal == {"language_model": language_model, "dense": dense, "note": TEXT_ONLY_NOTE}
    assert summary.modules == count and all(name.startswith(layers + ".") for name in qm.results or {})
    out = tmp_path / "out"
    assert qm.save(out).verified

    config = json.loads((out / "config.json").read_text())
    source_config = json.loads((src / "config.json").read_text())
    assert config["model_type"] == source_config["model_type"] and config["architectures"] == [cls]
    for sub in ("text_config", "vision_config"):  # what transformers wrote (its diff), with the same values
        assert {k: config[sub][k] for k in source_config[sub]} == source_config[sub]
    stored = config["quantization_config"]
    assert stored["modules_to_not_convert"] == [part.rpartition(".")[2] for part in dense]
    report = json.loads((out / "quant_report.json").read_text())["summary"]
    assert report["multimodal"]["note"] == TEXT_ONLY_NOTE

    # transformers 5's module names; every quantized module inside the decoder layers, every dense part bit-exact
    saved = _tensors(out)
    quantized = {name.rsplit(".", 1)[0] for name in saved if name.endswith(".qweight")}
    assert len(quantized) == count and all(name.startswith(layers + ".") for name in quantized)
    model = qm.model
    for part in dense:
        names = [f"{part}.{n}" for n, _ in model.get_submodule(part).named_parameters()]
        assert names and all(torch.equal(saved[n], model.get_parameter(n).detach()) for n in names)
    # the stored rules keep the dense parts dense under both namings (transformers 5's and the hub's / vLLM's)
    reread, _ = read_checkpoint_config(out)
    for part in dense:
        leaf = part.rpartition(".")[2]
        for name, _ in model.get_submodule(part).named_parameters():
            module = name.rpartition(".")[0]
            assert reread.for_module(f"{part}.{module}".rstrip(".")) is None
            assert reread.for_module(f"{leaf}.{module}".rstrip(".")) is None
    assert all(reread.for_module(name) is not None for name in quantized)

    loaded = qhf.load_quantized(out)
    assert type(loaded.model).__name__ == cls
    inputs = image_text_inputs(loaded.model.config)
    got = _logits(loaded.model, inputs)
    assert torch.equal(_logits(qm.model, inputs), got)
    other = image_text_inputs(loaded.model.config, seed=1)  # other pixels: the image reaches the text
    assert not torch.allclose(_logits(loaded.model, other)[0, -1], got[0, -1])
    if method == "gptq":  # the names are transformers': a dense export loads with its own class, same logits
        from transformers import AutoModelForImageTextToText

        qhf.export_dense(out, tmp_path / "dense", dtype=torch.float32)
        exported, info = AutoModelForImageTextToText.from_pretrained(tmp_path / "dense", output_loading_info=True)
        assert type(exported).__name__ == cls
        apart = set(info["missing_keys"]) | set(info["unexpected_keys"])
        if family == "llama4":  # experts are written per expert (as the reference does); transformers fuses them
            assert apart and all(".feed_forward.experts." in name for name in apart)
            return
        assert not apart
        torch.testing.assert_close(_logits(exported.eval(), inputs), got, rtol=0, atol=1e-4)  # kernels round apart


def test_rtn_quantizes_the_language_stack_only(sources: Any, tmp_path: Path) -> None:
    qm = qhf.load(sources("qwen2_5_vl"), {"method": "rtn", "bits": 4, "group_size": 32})
    summary = qm.quantize()
    assert summary.modules == 14 and summary.multimodal is not None
    qm.save(tmp_path / "out")
    loaded = qhf.load_quantized(tmp_path / "out")
    inputs = image_text_inputs(loaded.model.config)
    assert torch.equal(_logits(qm.model, inputs), _logits(loaded.model, inputs))


def test_streaming_run_writes_the_same_bytes(sources: Any, tokenizer: Any, tmp_path: Path) -> None:
    written = []
    for keep in (True, False):
        qm = qhf.load(sources("gemma3"), {"method": "gptq", "bits": 4, "group_size": 32})
        qm.quantize(_calibration(tokenizer), keep_in_memory=keep)
        qm.save(tmp_path / str(keep))
        written.append((tmp_path / str(keep) / "model.safetensors").read_bytes())
    assert written[0] == written[1]


def test_llava_language_stack_quantizes_as_its_llama_text_model(sources: Any, tokenizer: Any, tmp_path: Path) -> None:
    """Text-only calibration through the composite model reaches each decoder layer with the inputs the bare
    language model gives it: GPTQ packs the same tensors for LLaVA's Llama as for that Llama on its own."""
    from transformers import AutoModelForImageTextToText, LlamaForCausalLM

    src = sources("llava")
    vlm = AutoModelForImageTextToText.from_pretrained(src)
    text = LlamaForCausalLM(vlm.config.text_config)
    own = {k.removeprefix("model.language_model."): v for k, v in vlm.state_dict().items() if "language_model" in k}
    text.model.load_state_dict(own)
    text.lm_head.load_state_dict(vlm.lm_head.state_dict())
    text.save_pretrained(tmp_path / "llama")
    tokenizer.save_pretrained(tmp_path / "llama")
    runs = {}
    for name, path in (("llava", src), ("llama", tmp_path / "llama")):
        qm = qhf.load(path, {"method": "gptq", "bits": 4, "group_size": 32})
        qm.quantize(_calibration(tokenizer))
        runs[name] = {module.split("layers.", 1)[1]: done.tensors() for module, done in (qm.results or {}).items()}
    assert runs["llava"].keys() == runs["llama"].keys() and len(runs["llava"]) == 14
    for module, tensors in runs["llava"].items():
        assert all((tensors[k] == runs["llama"][module][k]).all() for k in tensors), module


def test_vision_encoder_deeper_than_the_language_model_is_refused_at_load(tokenizer: Any, tmp_path: Path) -> None:
    src = save_vision_model(tmp_path / "src", llava(vision_layers=3), tokenizer)
    with pytest.raises(UnsupportedArchitectureError, match=r"model\.vision_tower\.encoder\.layers\.2: .*CONFIG-LAYERS"):
        qhf.load(src, {"method": "gptq", "bits": 4, "group_size": 32})


def test_model_class_follows_the_mappings_and_the_named_architecture() -> None:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    assert model_class(FAMILIES["qwen2_5_vl"]()) is AutoModelForImageTextToText  # not a causal-LM type
    assert model_class(FAMILIES["gemma3"]()) is AutoModelForCausalLM  # both mappings name the same class
    vision = FAMILIES["llama4"]()
    assert model_class(vision) is AutoModelForCausalLM  # no architecture named: the causal-LM mapping's
    vision.architectures = ["Llama4ForConditionalGeneration"]
    assert model_class(vision) is AutoModelForImageTextToText
    assert model_class(AutoConfig.for_model("llama")) is AutoModelForCausalLM


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_head_tied_as_transformers_ties_it(family: str) -> None:
    from transformers import AutoModelForImageTextToText

    config = FAMILIES[family]()
    torch.manual_seed(0)
    real = AutoModelForImageTextToText.from_config(config)
    shared = real.get_output_embeddings().weight is real.get_input_embeddings().weight
    config.architectures = [type(real).__name__]
    assert head_tied(meta_skeleton(config)) == shared
    # Gemma 3's and Mistral 3's own configs tie by default; their text configs (tie_word_embeddings=False) do not
    assert shared == (family in ("gemma3", "mistral3"))


def test_kv_cache_is_off_on_the_text_config_too() -> None:
    config = FAMILIES["gemma3"]()
    config.architectures = ["Gemma3ForConditionalGeneration"]
    model = meta_skeleton(config)
    text = model.get_decoder().config
    assert text.use_cache is True
    with kv_cache_off(model):
        assert text.use_cache is False and model.config.use_cache is False
    assert text.use_cache is True


def test_llava_processor_is_carried_and_drives_the_reloaded_model(tokenizer: Any, tmp_path: Path) -> None:
    """The source's processor files reach the checkpoint; the processor loaded from the checkpoint turns an image
    and a prompt into inputs on which the reloaded model equals the in-memory quantized one."""
    from PIL import Image
    from transformers import AutoProcessor

    src = save_vision_model(tmp_path / "src", llava(), tokenizer)
    save_llava_processor(src, tokenizer)
    qm = qhf.load(src, {"method": "gptq", "bits": 4, "group_size": 32})
    qm.quantize(_calibration(qm.tokenizer))
    qm.save(tmp_path / "out")
    assert (tmp_path / "out" / "processor_config.json").read_bytes() == (src / "processor_config.json").read_bytes()
    processor = AutoProcessor.from_pretrained(tmp_path / "out")
    pixels = (torch.rand(28, 28, 3, generator=torch.Generator().manual_seed(0)) * 255).to(torch.uint8).numpy()
    inputs = processor(text="def <image> fibonacci", images=Image.fromarray(pixels), return_tensors="pt")
    assert int((inputs["input_ids"] == IMAGE).sum()) == 4  # one token per 14-pixel patch
    loaded = qhf.load_quantized(tmp_path / "out")
    batch = {"input_ids": inputs["input_ids"], "pixel_values": inputs["pixel_values"]}
    assert torch.equal(_logits(qm.model, batch), _logits(loaded.model, batch))


def test_dense_parts_join_the_configs_own_dynamic_rules() -> None:
    """A VLM's kept-dense rules are added to the run's own ``dynamic`` rules (a mixed-precision run's widths),
    not written over them; without rules of its own the checkpoint holds only the dense parts' rules."""
    from qhf.checkpoint_config import checkpoint_dict
    from qhf.quant_config import read_quantize_config

    own = {r"+:^model\.language_model\.layers\.0\.mlp\.down_proj$": {"bits": 8}}
    parts = ("model.visual",)
    with_rules = checkpoint_dict(read_quantize_config({"method": "gptq", "dynamic": own}), dense_parts=parts)
    plain = checkpoint_dict(read_quantize_config({"method": "gptq"}), dense_parts=parts)
    dense_rule = r"-:^(?:model\.)?visual\b"
    assert list(plain["dynamic"]) == [dense_rule]
    assert list(with_rules["dynamic"]) == [*own, dense_rule]
    assert with_rules["dynamic"][next(iter(own))] == {"bits": 8}
    assert with_rules["modules_to_not_convert"] == plain["modules_to_not_convert"] == ["visual"]
