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
    "gemma2": {"config": {"head_dim": 16}, "norm_offset": True},
    "gemma3": {"config": {"head_dim": 16, "sliding_window": 64}, "norm_offset": True},
    "starcoder2": {"config": {}, "eps": "attention.layer_norm_epsilon", "eps_field": "norm_epsilon"},
    "stablelm": {"config": {}, "eps": "attention.layer_norm_epsilon", "eps_field": "layer_norm_eps"},
    "nemotron": {"config": {"head_dim": 16}, "norm_offset": True, "eps_field": "norm_eps"},
    "falcon": {
        "config": {"num_key_value_heads": 1},
        "eps": "attention.layer_norm_epsilon",
        "eps_field": "layer_norm_epsilon",
    },
}
GGUF_PY_ARCH = {"qwen2moe": "qwen2moe", "qwen3moe": "qwen3moe", "mistral": "llama"}


def test_every_table_record_is_checked_here() -> None:
    assert sorted(CASES) == sorted(record.key for record in ARCHITECTURES)


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
    meta[f"{a}.rope.dimension_count"] = int(head_dim * getattr(config, "partial_rotary_factor", 1.0))
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
        expected = config.rope_parameters["rope_theta"] if field == "rope_theta" else getattr(config, field)
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
