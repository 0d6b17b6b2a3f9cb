"""qformats' architecture table against transformers' own GGUF loader, one tiny model per architecture.

For each architecture a tiny random transformers model is written to a .gguf the way llama.cpp's converter
lays it out: names from gguf-py's tensor name map (what transformers' loader inverts, independent of qformats'
table), q/k rows permuted for llama, Gemma / Nemotron norms stored as ``1 + w``, MoE experts split into gate /
up / down stacks. Then:

* transformers' ``load_gguf_checkpoint`` and qformats' ``read_gguf`` give the same tensors, bit for bit;
* every config field transformers reads from the file has the same value in qformats' config, and the fields
  qformats reads beyond it equal the original model's;
* qformats' tensors equal the original model's state dict, and qhf's source of the file gives its logits.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

from qformats.gguf_file import read_gguf, write_gguf  # noqa: E402
from qformats.gguf_file.architecture_table import ARCHITECTURES  # noqa: E402

SMALL = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 80, "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2,
         "max_position_embeddings": 256}  # fmt: skip
MOE = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
# per table key: config overrides (values transformers' loader does not read are left at the class default
# where it would otherwise differ), the layer-norm epsilon metadata key, llama.cpp's stored conversions
CASES: dict[str, dict] = {
    "llama": {"config": {}, "permute": True},
    "mistral": {"config": {}, "permute": True, "name": "mistral"},
    "qwen2": {"config": {}},
    "qwen2moe": {"config": {**MOE, "shared_expert_intermediate_size": 48}},
    "qwen3": {"config": {"head_dim": 32}},
    "qwen3moe": {"config": {**MOE, "head_dim": 16, "norm_topk_prob": True}},
    "phi3": {"config": {}},
    # Gemma: the 1/sqrt(head_dim) attention scale llama.cpp uses (qformats reads it so; transformers leaves 256)
    "gemma2": {"config": {"head_dim": 16, "query_pre_attn_scalar": 16}, "norm_offset": True},
    "gemma3": {"config": {"head_dim": 16, "sliding_window": 64, "query_pre_attn_scalar": 16}, "norm_offset": True},
    "starcoder2": {"config": {}, "eps": "attention.layer_norm_epsilon", "eps_field": "norm_epsilon"},
    "stablelm": {"config": {}, "eps": "attention.layer_norm_epsilon", "eps_field": "layer_norm_eps"},
    # llama.cpp's converter stores Nemotron's epsilon as attention.layer_norm_epsilon (transformers reads the rms key)
    "nemotron": {
        "config": {"head_dim": 16},
        "norm_offset": True,
        "eps": "attention.layer_norm_epsilon",
        "eps_field": "norm_eps",
    },
    "falcon": {
        "config": {"num_key_value_heads": 1},
        "eps": "attention.layer_norm_epsilon",
        "eps_field": "layer_norm_epsilon",
    },
}
# records checked by their own tests below (transformers' loader does not read them correctly)
OWN_TESTS = {"falcon-2norm"}
GGUF_PY_ARCH = {"qwen2moe": "qwen2moe", "qwen3moe": "qwen3moe", "mistral": "llama"}


def test_every_table_record_is_checked_here() -> None:
    assert sorted([*CASES, *OWN_TESTS]) == sorted(record.key for record in ARCHITECTURES)


def _llama_cpp_permute(w: np.ndarray, heads: int) -> np.ndarray:
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _tiny(key: str, extra: dict | None = None):
    """(record, config, model) of a tiny random model; ``extra``: config fields over the case's."""
    record = next(r for r in ARCHITECTURES if r.key == key)
    config = transformers.AutoConfig.for_model(record.model_type, **{**SMALL, **CASES[key]["config"], **(extra or {})})
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():  # non-trivial norms and biases (the defaults 1 / 0 would hide an offset)
        for param in model.parameters():
            if param.ndim == 1:
                param.copy_(torch.randn_like(param) * 0.1 + (0.0 if CASES[key].get("norm_offset") else 1.0))
    return record, config, model


def _metadata(record, config, case: dict) -> dict:
    a = record.gguf
    eps_field = case.get("eps_field", "rms_norm_eps")
    meta = {
        "general.architecture": a, "general.name": case.get("name", f"tiny {a}"),
        f"{a}.context_length": config.max_position_embeddings, f"{a}.embedding_length": config.hidden_size,
        f"{a}.block_count": config.num_hidden_layers,
        f"{a}.feed_forward_length": getattr(config, "ffn_hidden_size", None) or config.intermediate_size,
        f"{a}.attention.head_count": config.num_attention_heads,
        f"{a}.attention.head_count_kv": config.num_key_value_heads,
        f"{a}.{case.get('eps', 'attention.layer_norm_rms_epsilon')}": float(getattr(config, eps_field)),
        "tokenizer.ggml.tokens": [f"t{i}" for i in range(config.vocab_size)],
        "tokenizer.ggml.bos_token_id": 2, "tokenizer.ggml.eos_token_id": 1, "tokenizer.ggml.padding_token_id": 0,
    }  # fmt: skip
    theta = (config.rope_parameters.get("full_attention") or config.rope_parameters)["rope_theta"]
    meta[f"{a}.rope.freq_base"] = float(theta)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    rope_params = config.rope_parameters.get("full_attention") or config.rope_parameters  # transformers 5 keeps it here
    partial = rope_params.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0))
    meta[f"{a}.rope.dimension_count"] = int(head_dim * partial)
    meta[f"{a}.attention.key_length"] = meta[f"{a}.attention.value_length"] = head_dim
    if getattr(config, "sliding_window", None):
        meta[f"{a}.attention.sliding_window"] = config.sliding_window
    if getattr(config, "num_experts", None):
        meta[f"{a}.expert_count"] = config.num_experts
        meta[f"{a}.expert_used_count"] = config.num_experts_per_tok
        meta[f"{a}.expert_feed_forward_length"] = config.moe_intermediate_size
    if getattr(config, "shared_expert_intermediate_size", None):
        meta[f"{a}.expert_shared_feed_forward_length"] = config.shared_expert_intermediate_size
    for field in ("attn_logit_softcapping", "final_logit_softcapping"):
        if getattr(config, field, None) is not None:
            meta[f"{a}.{field}"] = float(getattr(config, field))
    return meta


def _write(path, key: str, record, config, model) -> None:
    """The tiny model as llama.cpp's converter would store it (gguf-py's names, llama.cpp's conversions)."""
    case = CASES[key]
    arch = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == GGUF_PY_ARCH.get(key, record.gguf))
    names = gguf.get_tensor_name_map(arch, config.num_hidden_layers)
    tensors: dict[str, np.ndarray] = {}
    for hf, param in model.state_dict().items():
        w = param.detach().numpy().astype(np.float32)
        if hf == "lm_head.weight" and config.tie_word_embeddings:
            continue
        if hf.endswith("mlp.experts.gate_up_proj"):
            layer = hf.split(".")[2]
            half = w.shape[1] // 2
            tensors[f"blk.{layer}.ffn_gate_exps.weight"], tensors[f"blk.{layer}.ffn_up_exps.weight"] = (
                np.ascontiguousarray(w[:, :half]), np.ascontiguousarray(w[:, half:]))  # fmt: skip
            continue
        if hf.endswith("mlp.experts.down_proj"):
            tensors[f"blk.{hf.split('.')[2]}.ffn_down_exps.weight"] = w
            continue
        stem, suffix = hf.rsplit(".", 1)
        name = names.get_name(stem)
        assert name is not None, f"gguf-py has no name for {hf}"
        name = f"{name}.{suffix}"
        if case.get("permute") and name.endswith("attn_q.weight"):
            w = _llama_cpp_permute(w, config.num_attention_heads)
        if case.get("permute") and name.endswith("attn_k.weight"):
            w = _llama_cpp_permute(w, config.num_key_value_heads)
        if case.get("norm_offset") and name.endswith("norm.weight"):
            w = w + np.float32(1)
        if name.endswith("ffn_gate_inp_shexp.weight"):
            w = w.reshape(-1)
        tensors[name] = np.ascontiguousarray(w)
    write_gguf(path, _metadata(record, config, case), tensors)  # type: ignore[arg-type]


@pytest.mark.parametrize("key", sorted(CASES))
def test_architecture_matches_transformers_gguf_loader(tmp_path, key: str) -> None:
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    record, config, model = _tiny(key)
    path = tmp_path / f"{key}.gguf"
    _write(path, key, record, config, model)
    ours = read_gguf(path)
    assert ours.architecture.key == key

    # transformers' tensor loading asks gguf-py for an architecture named after model_type, which fails for
    # "mistral" (llama.cpp stores Mistral as llama); a llama model of the same shape has the same names
    names_from = model if key != "mistral" else _tiny("llama")[2]
    parsed = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=names_from)
    theirs = {k: v.numpy() for k, v in parsed["tensors"].items()}
    state = ours.state_dict()
    tied_head = {"lm_head.weight"} if config.tie_word_embeddings else set()
    assert set(state) == set(theirs) - tied_head, sorted(set(state) ^ set(theirs))
    original = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    assert set(state) == set(original) - tied_head
    for name, value in state.items():
        assert value.dtype == np.float32 and value.shape == ours.shape(name), name
        assert np.array_equal(value, theirs[name]), f"{key}: {name} differs from transformers' loader"
        step = 2.0**-23 if CASES[key].get("norm_offset") else 0.0  # (w + 1) - 1 rounds w to float32 steps of 1
        assert np.allclose(value, original[name], rtol=0, atol=step), f"{key}: {name} differs from the model written"

    read_by_transformers = {k: v for k, v in parsed["config"].items() if k != "_model_name_or_path"}
    for field, value in read_by_transformers.items():
        assert ours.config.get(field) == value, f"{key}: config {field}: ours {ours.config.get(field)!r}, {value!r}"
    for field in set(ours.config) - set(read_by_transformers) - {"architectures", "num_key_value_heads"}:
        in_rope = field in ("rope_theta", "partial_rotary_factor")  # transformers 5 keeps these in rope_parameters
        expected = config.rope_parameters[field] if in_rope else getattr(config, field)
        # metadata floats are float32: 1e-5 is stored as 9.9999997e-06
        assert ours.config[field] == pytest.approx(expected, rel=1e-6), f"{key}: added config field {field}"

    from qhf.source import open_source

    source = open_source(path)
    assert type(source.model).__name__ == record.hf_class
    dense = source.materialize_all().eval()
    ids = torch.arange(3, 40).unsqueeze(0)
    with torch.no_grad():
        ours_logits, reference = dense(ids).logits, model(ids).logits
    assert torch.allclose(ours_logits, reference, rtol=0, atol=1e-5), (key, (ours_logits - reference).abs().max())


# --- grouped-KV Falcon and Phi-3 LongRoPE: transformers' loader reads neither correctly, so the reference is the
# model written (llama.cpp's converter layout) and its logits; transformers' tensors are compared where they agree.


def _converter_falcon_qkv(w: np.ndarray, heads: int, groups: int) -> np.ndarray:
    """llama.cpp's ``conversion/falcon.py`` reorder (Hugging Face grouped order -> all q, all k, all v)."""
    head_dim = w.shape[0] // (heads + 2 * groups)
    qkv = w.reshape(groups, heads // groups + 2, head_dim, *w.shape[1:])
    q = qkv[:, :-2].reshape(heads * head_dim, *w.shape[1:])
    k = qkv[:, [-2]].reshape(groups * head_dim, *w.shape[1:])
    v = qkv[:, [-1]].reshape(groups * head_dim, *w.shape[1:])
    return np.concatenate([q, k, v])


@pytest.mark.parametrize("norms", [1, 2])
def test_grouped_kv_falcon_reads_the_model_llama_cpp_converted(tmp_path, norms: int) -> None:
    """Falcon2-11B's layout (one norm) and Falcon-40B's (two parallel norms), 2 KV groups of 2 query heads."""
    from qhf.source import open_source
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    config = transformers.FalconConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_kv_heads=2, new_decoder_architecture=True,
        num_ln_in_parallel_attn=norms, vocab_size=80, bias=False, layer_norm_epsilon=1e-5, ffn_hidden_size=256,
        bos_token_id=2, eos_token_id=1, pad_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.FalconForCausalLM(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            if param.ndim == 1:
                param.copy_(torch.randn_like(param) * 0.1 + 1.0)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.FALCON, 2)
    tensors = {}
    for hf, param in model.state_dict().items():
        if hf == "lm_head.weight":
            continue  # tied
        stem, suffix = hf.rsplit(".", 1)
        w = param.detach().numpy().astype(np.float32)
        if stem.endswith("query_key_value"):
            w = _converter_falcon_qkv(w, 4, 2)
        tensors[f"{names.get_name(stem)}.{suffix}"] = np.ascontiguousarray(w)
    assert any(name.endswith("attn_norm_2.weight") for name in tensors) == (norms == 2)
    meta = {
        "general.architecture": "falcon", "general.name": "tiny falcon", "falcon.tensor_data_layout": "jploski",
        "falcon.context_length": 2048, "falcon.embedding_length": 64, "falcon.feed_forward_length": 256,
        "falcon.block_count": 2, "falcon.attention.head_count": 4, "falcon.attention.head_count_kv": 2,
        "falcon.attention.layer_norm_epsilon": 1e-5, "tokenizer.ggml.tokens": [f"t{i}" for i in range(80)],
        "tokenizer.ggml.bos_token_id": 2, "tokenizer.ggml.eos_token_id": 1, "tokenizer.ggml.padding_token_id": 0,
    }  # fmt: skip
    path = tmp_path / "falcon.gguf"
    write_gguf(path, meta, tensors)  # type: ignore[arg-type]

    ours = read_gguf(path)
    assert ours.architecture.key == ("falcon" if norms == 1 else "falcon-2norm")
    cfg = ours.config
    assert (cfg["new_decoder_architecture"], cfg["num_kv_heads"], cfg["num_ln_in_parallel_attn"]) == (True, 2, norms)
    original = {k: v.detach().numpy() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    state = ours.state_dict()
    assert set(state) == set(original)
    for name, value in state.items():
        assert np.array_equal(value, original[name]), f"falcon ({norms} norms): {name}"

    # transformers' loader hands the stored (llama.cpp) QKV order through unchanged: not the model's
    parsed = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=model)
    qkv = "transformer.h.0.self_attention.query_key_value.weight"
    assert np.array_equal(parsed["tensors"][qkv].numpy(), tensors["blk.0.attn_qkv.weight"])
    assert not np.array_equal(parsed["tensors"][qkv].numpy(), original[qkv])
    assert "new_decoder_architecture" not in parsed["config"]
    for name in set(state) - {qkv.replace(".0.", f".{i}.") for i in range(2)}:
        assert np.array_equal(parsed["tensors"][name].numpy(), state[name]), name

    source = open_source(path)
    dense = source.materialize_all().eval()
    ids = torch.arange(3, 40).unsqueeze(0)
    with torch.no_grad():
        ours_logits, reference = dense(ids).logits, model(ids).logits
    assert torch.allclose(ours_logits, reference, rtol=0, atol=1e-5), (ours_logits - reference).abs().max()


def test_phi3_longrope_and_partial_rotary_read_from_llama_cpp_tensors_and_keys(tmp_path) -> None:
    """Phi-3 long-context layout (llama.cpp's ``conversion/phi.py``): ``rope_factors_long/short`` tensors,
    ``rope.scaling.original_context_length`` / ``attn_factor``; rotary dims half the head (Phi-4-mini style)."""
    import math

    from qhf.source import open_source
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    rotary = 8  # head_dim 16, partial_rotary_factor 0.5
    long_factor = [1.0 + 0.5 * i for i in range(rotary // 2)]
    short_factor = [1.0 + i / 16 for i in range(rotary // 2)]  # exact in float32, as the file stores them
    scaling = {"rope_type": "longrope", "long_factor": long_factor, "short_factor": short_factor}
    record, config, model = _tiny(
        "phi3", {"max_position_embeddings": 512, "original_max_position_embeddings": 128,
                 "partial_rotary_factor": 0.5, "rope_scaling": scaling},
    )  # fmt: skip
    path = tmp_path / "phi3.gguf"
    _write(path, "phi3", record, config, model)
    from qformats.gguf_file import GGUFReader

    reader = GGUFReader(path)
    meta = {key: reader.metadata[key] for key in reader.metadata}
    attn_factor = math.sqrt(1 + math.log(512 / 128) / math.log(128))  # the converter's
    meta.update({"phi3.rope.scaling.original_context_length": 128, "phi3.rope.scaling.attn_factor": attn_factor})
    assert reader.value("phi3.rope.dimension_count") == rotary
    tensors = {name: reader.dequantize(name) for name in reader.tensors}
    tensors["rope_factors_long.weight"] = np.asarray(long_factor, np.float32)
    tensors["rope_factors_short.weight"] = np.asarray(short_factor, np.float32)
    del reader
    write_gguf(path, meta, tensors)  # type: ignore[arg-type]

    ours = read_gguf(path)
    cfg = ours.config
    assert cfg["partial_rotary_factor"] == 0.5 and cfg["original_max_position_embeddings"] == 128
    assert cfg["rope_scaling"]["rope_type"] == "longrope"
    assert cfg["rope_scaling"]["long_factor"] == long_factor and cfg["rope_scaling"]["short_factor"] == short_factor
    assert cfg["rope_scaling"]["attention_factor"] == pytest.approx(attn_factor, rel=1e-7)
    assert sorted(ours.skipped) == ["rope_factors_long.weight", "rope_factors_short.weight"]

    parsed = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=model)
    theirs = {k: v.numpy() for k, v in parsed["tensors"].items()}
    state = ours.state_dict()
    assert set(state) == set(theirs) - ({"lm_head.weight"} if config.tie_word_embeddings else set())
    for name, value in state.items():
        assert np.array_equal(value, theirs[name]), name
    assert "rope_scaling" not in parsed["config"]  # transformers' loader drops LongRoPE (and the factor tensors)

    dense = open_source(path).materialize_all().eval()
    for length in (37, 200):  # short factors up to 128 positions, long ones beyond
        ids = (torch.arange(length) % 77 + 3).unsqueeze(0)
        with torch.no_grad():
            ours_logits, reference = dense(ids).logits, model(ids).logits
        assert torch.allclose(ours_logits, reference, rtol=0, atol=1e-5), (
            length,
            (ours_logits - reference).abs().max(),
        )


# transformers' GGUF_CONFIG_MAPPING keys -> the general.architecture value llama.cpp writes
TRANSFORMERS_TO_GGUF = {"qwen2_moe": "qwen2moe", "qwen3_moe": "qwen3moe", "gpt_oss": "gpt-oss",
                        "minimax_m2": "minimax-m2", "umt5": "t5", "mistral": "llama"}  # fmt: skip


def test_every_architecture_transformers_maps_is_read_or_refused_with_a_reason(tmp_path) -> None:
    from qformats.gguf_file import GGUFFileError
    from qformats.gguf_file.architecture_table import REFUSED_ARCHITECTURES
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING

    mapped = sorted(set(GGUF_CONFIG_MAPPING) - {"general", "tokenizer"})
    read = {r.gguf for r in ARCHITECTURES}
    assert not read & set(REFUSED_ARCHITECTURES)
    refused_seen = set()
    for name in mapped:
        arch = TRANSFORMERS_TO_GGUF.get(name, name)
        if arch in read:
            continue
        assert arch in REFUSED_ARCHITECTURES, f"transformers maps {name!r} ({arch}): neither read nor refused"
        refused_seen.add(arch)
        path = tmp_path / f"{arch}.gguf"
        write_gguf(path, {"general.architecture": arch, "general.name": "x"}, {})
        with pytest.raises(GGUFFileError, match=rf"general.architecture {arch!r} is not read .*: .+; known"):
            read_gguf(path)
        with pytest.raises(GGUFFileError) as refused:
            read_gguf(path)
        assert REFUSED_ARCHITECTURES[arch] in str(refused.value)
    # every refusal names an architecture transformers maps (t5encoder: its T5 entry's encoder-only files)
    assert set(REFUSED_ARCHITECTURES) - refused_seen <= {"t5encoder"}
