"""One :class:`~.architecture.GGUFArchitecture` record per .gguf architecture the dense reader maps.

The mapping follows transformers' GGUF loader (``integrations/ggml.py``: ``GGUF_CONFIG_MAPPING``,
``GGUF_CONFIG_DEFAULTS_MAPPING``; ``modeling_gguf_pytorch_utils``: the tensor processors; the tensor names it
derives from gguf-py's name map), checked against it in
``tests-integration/test_gguf_architectures_vs_transformers.py``.
Where transformers leaves a stored value unread, the record reads it too (marked *added* below) so that a
file whose value differs from the config class's default still loads correctly:

* qwen3: ``attention.key_length`` -> ``head_dim``;
* qwen2moe / qwen3moe: ``expert_feed_forward_length`` -> ``moe_intermediate_size`` (qwen2moe also
  ``expert_shared_feed_forward_length`` -> ``shared_expert_intermediate_size``);
* gemma2 / gemma3: ``attn_logit_softcapping`` / ``final_logit_softcapping``, and ``query_pre_attn_scalar`` by
  llama.cpp's rule (:mod:`.gemma_attention`; transformers leaves it at 256);
* starcoder2: ``vocab_size`` and ``rope.freq_base``; stablelm: ``rope.freq_base``;
* nemotron: ``attention.layer_norm_epsilon`` -> ``norm_eps`` (the key llama.cpp's converter writes and reads) and
  ``rope.dimension_count`` -> ``partial_rotary_factor``; phi3: ``rope.dimension_count`` and LongRoPE;
* falcon: ``feed_forward_length`` -> ``ffn_hidden_size``, ``attention.layer_norm_epsilon`` -> ``layer_norm_epsilon``.

Falcon: multi-query files (``attention.head_count_kv`` 1, Falcon-7B) read as transformers reads them; grouped-KV
files (Falcon-40B / 180B / Falcon2-11B) have llama.cpp's fused QKV row order undone and the "new decoder
architecture" fields set (:mod:`.falcon_layout`; transformers' loader reads them wrongly); files whose layers
hold ``attn_norm_2`` (two parallel norms) use the ``falcon-2norm`` record. Phi-3: ``rope.dimension_count`` ->
``partial_rotary_factor`` and LongRoPE from the ``rope_factors_*`` tensors (:mod:`.phi3_rope`).

:data:`REFUSED_ARCHITECTURES`: the other architectures transformers' GGUF loader maps, each refused by name with
the reason (checked against transformers' list in ``tests-integration/test_gguf_architectures_vs_transformers.py``).

Tensor names (``N`` = layer): ``token_embd`` -> ``model.embed_tokens``, ``output_norm`` -> ``model.norm``,
``output`` -> ``lm_head`` (absent when tied), ``blk.N.attn_{q,k,v,output}`` -> ``self_attn.{q,k,v,o}_proj``,
``ffn_{gate,up,down}`` -> ``mlp.*_proj`` and the per-architecture extras below.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .architecture import GGUFArchitecture, TensorFlag, TensorRule, WriteRule
from .falcon_layout import FALCON_QKV, TWO_NORMS, falcon_config
from .gemma_attention import gemma_attention_scale
from .phi3_rope import ROPE_FACTOR_TENSORS, nemotron_rope_config, phi3_rope_config
from .tensor_conversions import GATE_UP_EXPERTS, IDENTITY, NORM_OFFSET, ROPE_K, ROPE_Q, ROW_VECTOR, Conversion


def _rules(names: Mapping[str, str], conversions: Mapping[str, Conversion] | None = None) -> tuple[TensorRule, ...]:
    """One single-source rule per (llama.cpp name, Hugging Face name); ``conversions`` by llama.cpp name."""
    conversions = conversions or {}
    return tuple(TensorRule((gguf,), hf, conversions.get(gguf, IDENTITY)) for gguf, hf in names.items())


def _norms(names: Mapping[str, str]) -> dict[str, Conversion]:
    """``norm_offset`` for every norm weight of ``names`` (Gemma, Nemotron: stored as ``1 + w``)."""
    return {gguf: NORM_OFFSET for gguf in names if gguf.endswith("norm.weight")}


# --- tensor names -----------------------------------------------------------------------------------------
GLOBAL = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
          "output.weight": "lm_head.weight"}  # fmt: skip
GLOBAL_NORM_BIAS = {**GLOBAL, "output_norm.bias": "model.norm.bias"}
ATTENTION = {"attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
             "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight"}  # fmt: skip
QKV_BIAS = {"attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias",
            "attn_v.bias": "self_attn.v_proj.bias"}  # fmt: skip
QK_NORM = {"attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight"}
NORMS = {"attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight"}
NORMS_BIAS = {**NORMS, "attn_norm.bias": "input_layernorm.bias", "ffn_norm.bias": "post_attention_layernorm.bias"}
GATED_MLP = {"ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
             "ffn_down.weight": "mlp.down_proj.weight"}  # fmt: skip
GEMMA_NORMS = {"attn_norm.weight": "input_layernorm.weight",
               "post_attention_norm.weight": "post_attention_layernorm.weight",
               "ffn_norm.weight": "pre_feedforward_layernorm.weight",
               "post_ffw_norm.weight": "post_feedforward_layernorm.weight"}  # fmt: skip
EXPERTS = {"ffn_gate_inp.weight": "mlp.gate.weight", "ffn_down_exps.weight": "mlp.experts.down_proj"}
SHARED_EXPERT = {"ffn_gate_inp_shexp.weight": "mlp.shared_expert_gate.weight",
                 "ffn_gate_shexp.weight": "mlp.shared_expert.gate_proj.weight",
                 "ffn_up_shexp.weight": "mlp.shared_expert.up_proj.weight",
                 "ffn_down_shexp.weight": "mlp.shared_expert.down_proj.weight"}  # fmt: skip
GATE_UP = TensorRule(("ffn_gate_exps.weight", "ffn_up_exps.weight"), "mlp.experts.gate_up_proj", GATE_UP_EXPERTS)

# --- metadata keys (under "<architecture>.") -> config fields -------------------------------------------
BASE_KEYS = (
    ("context_length", "max_position_embeddings"),
    ("block_count", "num_hidden_layers"),
    ("feed_forward_length", "intermediate_size"),
    ("embedding_length", "hidden_size"),
    ("rope.freq_base", "rope_theta"),
    ("attention.head_count", "num_attention_heads"),
    ("attention.head_count_kv", "num_key_value_heads"),
    ("attention.layer_norm_rms_epsilon", "rms_norm_eps"),
    ("vocab_size", "vocab_size"),
)
LLAMA_KEYS = (*BASE_KEYS, ("rope.dimension_count", "head_dim"))
HEAD_DIM = (("attention.key_length", "head_dim"),)
MOE_KEYS = (("expert_count", "num_experts"), ("expert_used_count", "num_experts_per_tok"),
            ("expert_feed_forward_length", "moe_intermediate_size"))  # fmt: skip
GEMMA_KEYS = (*BASE_KEYS, *HEAD_DIM, ("attention.sliding_window", "sliding_window"),
              ("attn_logit_softcapping", "attn_logit_softcapping"),
              ("final_logit_softcapping", "final_logit_softcapping"))  # fmt: skip
LAYERNORM_KEYS = tuple(k for k in BASE_KEYS if k[0] != "attention.layer_norm_rms_epsilon")

LLAMA_LAYER = {**NORMS, **ATTENTION, **GATED_MLP}
_LLAMA_ROPE = {"attn_q.weight": ROPE_Q, "attn_k.weight": ROPE_K}
GEMMA_LAYER = {**GEMMA_NORMS, **ATTENTION, **GATED_MLP}
GEMMA3_LAYER = {**GEMMA_LAYER, **QK_NORM}
STARCODER2_LAYER = {**NORMS_BIAS, **ATTENTION, **QKV_BIAS, "attn_output.bias": "self_attn.o_proj.bias",
                    "ffn_up.weight": "mlp.c_fc.weight", "ffn_up.bias": "mlp.c_fc.bias",
                    "ffn_down.weight": "mlp.c_proj.weight", "ffn_down.bias": "mlp.c_proj.bias"}  # fmt: skip
NEMOTRON_LAYER = {**NORMS_BIAS, **ATTENTION, "ffn_up.weight": "mlp.up_proj.weight",
                  "ffn_down.weight": "mlp.down_proj.weight"}  # fmt: skip
FALCON_GLOBAL = {"token_embd.weight": "transformer.word_embeddings.weight",
                 "output_norm.weight": "transformer.ln_f.weight", "output_norm.bias": "transformer.ln_f.bias",
                 "output.weight": "lm_head.weight"}  # fmt: skip
FALCON_LAYER = {"attn_norm.weight": "input_layernorm.weight", "attn_norm.bias": "input_layernorm.bias",
                "attn_qkv.weight": "self_attention.query_key_value.weight",
                "attn_output.weight": "self_attention.dense.weight", "ffn_up.weight": "mlp.dense_h_to_4h.weight",
                "ffn_down.weight": "mlp.dense_4h_to_h.weight"}  # fmt: skip
# Falcon-40B's two parallel norms: llama.cpp's attn_norm feeds the MLP (ln_mlp), attn_norm_2 the attention
FALCON_2NORM_LAYER = {**{k: v for k, v in FALCON_LAYER.items() if not k.startswith("attn_norm.")},
                      "attn_norm.weight": "ln_mlp.weight", "attn_norm.bias": "ln_mlp.bias",
                      "attn_norm_2.weight": "ln_attn.weight", "attn_norm_2.bias": "ln_attn.bias"}  # fmt: skip
FALCON_KEYS = (*BASE_KEYS, ("feed_forward_length", "ffn_hidden_size"),
               ("attention.layer_norm_epsilon", "layer_norm_epsilon"))  # fmt: skip
FALCON_WRITE = WriteRule(refused="llama.cpp's falcon stores fused QKV rows in its own order; not written until "
                         "checked in llama.cpp")  # fmt: skip
PHI3_LAYER = {**NORMS, "attn_qkv.weight": "self_attn.qkv_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
              "ffn_up.weight": "mlp.gate_up_proj.weight", "ffn_down.weight": "mlp.down_proj.weight"}  # fmt: skip

# --- what the writer adds for llama.cpp (llama.cpp's model loaders and graphs, src/models/*.cpp) -------------
NO_BIAS = (("attention_bias", (False, None), "llama.cpp's llama graph has no projection biases"),
           ("mlp_bias", (False, None), "llama.cpp's llama graph has no projection biases"))  # fmt: skip
NO_SWA = (("use_sliding_window", (False, None), "llama.cpp's graph for it has no sliding-window attention"),)
DENSE_MOE: tuple[tuple[str, tuple[Any, ...], str], ...] = (
    ("mlp_only_layers", ((), [], None), "llama.cpp puts experts in every layer"),
    ("decoder_sparse_step", (1, None), "llama.cpp puts experts in every layer"),
)
ROUTERS = ("ffn_gate_inp.weight", "ffn_gate_inp_shexp.weight")
WINDOW_UNUSED = (("sliding_window", "llama.cpp attends to the whole context (same logits within the window)"),)

ARCHITECTURES: tuple[GGUFArchitecture, ...] = (
    GGUFArchitecture(
        key="llama", gguf="llama", model_type="llama", hf_class="LlamaForCausalLM", config_keys=LLAMA_KEYS,
        globals=_rules(GLOBAL), layer=_rules(LLAMA_LAYER, _LLAMA_ROPE), ignored=("rope_freqs.weight",),
        write=WriteRule(allowed=NO_BIAS),
    ),
    GGUFArchitecture(  # llama.cpp stores Mistral as llama; transformers reads it as Mistral only under this name
        key="mistral", gguf="llama", model_type="mistral", hf_class="MistralForCausalLM", config_keys=LLAMA_KEYS,
        globals=_rules(GLOBAL), layer=_rules(LLAMA_LAYER, _LLAMA_ROPE), general_name="mistral",
        ignored=("rope_freqs.weight",), write=WriteRule(allowed=NO_BIAS, unused=WINDOW_UNUSED),
    ),
    GGUFArchitecture(
        key="qwen2", gguf="qwen2", model_type="qwen2", hf_class="Qwen2ForCausalLM", config_keys=BASE_KEYS,
        globals=_rules(GLOBAL), layer=_rules({**LLAMA_LAYER, **QKV_BIAS}), write=WriteRule(allowed=NO_SWA),
    ),
    GGUFArchitecture(
        key="qwen2moe", gguf="qwen2moe", model_type="qwen2_moe", hf_class="Qwen2MoeForCausalLM",
        config_keys=(*BASE_KEYS, *MOE_KEYS, ("expert_shared_feed_forward_length", "shared_expert_intermediate_size")),
        globals=_rules(GLOBAL),
        layer=(*_rules({**NORMS, **ATTENTION, **QKV_BIAS, **EXPERTS, **SHARED_EXPERT},
                       {"ffn_gate_inp_shexp.weight": ROW_VECTOR}), GATE_UP),
        write=WriteRule(allowed=(*NO_SWA, *DENSE_MOE, ("norm_topk_prob", (False, None), "llama.cpp's qwen2moe "
                                 "routing does not renormalize the top-k weights")), untied_only=True, f32=ROUTERS),
    ),
    GGUFArchitecture(
        key="qwen3", gguf="qwen3", model_type="qwen3", hf_class="Qwen3ForCausalLM", config_keys=(*BASE_KEYS, *HEAD_DIM),
        globals=_rules(GLOBAL), layer=_rules({**LLAMA_LAYER, **QK_NORM}), write=WriteRule(allowed=NO_SWA),
    ),
    GGUFArchitecture(
        key="qwen3moe", gguf="qwen3moe", model_type="qwen3_moe", hf_class="Qwen3MoeForCausalLM",
        config_keys=(*BASE_KEYS, *HEAD_DIM, *MOE_KEYS), globals=_rules(GLOBAL),
        layer=(*_rules({**NORMS, **ATTENTION, **QK_NORM, **EXPERTS}), GATE_UP), defaults=(("norm_topk_prob", True),),
        write=WriteRule(allowed=(*NO_SWA, *DENSE_MOE, ("norm_topk_prob", (True,), "llama.cpp's qwen3moe routing "
                                 "renormalizes the top-k weights")), f32=ROUTERS),
    ),
    GGUFArchitecture(
        key="phi3", gguf="phi3", model_type="phi3", hf_class="Phi3ForCausalLM", config_keys=BASE_KEYS,
        globals=_rules(GLOBAL), layer=_rules(PHI3_LAYER), ignored=ROPE_FACTOR_TENSORS, config_rule=phi3_rope_config,
        write=WriteRule(unused=WINDOW_UNUSED),
    ),
    GGUFArchitecture(
        key="gemma2", gguf="gemma2", model_type="gemma2", hf_class="Gemma2ForCausalLM", config_keys=GEMMA_KEYS,
        globals=_rules(GLOBAL, _norms(GLOBAL)), layer=_rules(GEMMA_LAYER, _norms(GEMMA_LAYER)),
        config_rule=gemma_attention_scale(46), write=WriteRule(gemma_27b_layers=46, swa_pattern=2),
    ),
    GGUFArchitecture(
        key="gemma3", gguf="gemma3", model_type="gemma3_text", hf_class="Gemma3ForCausalLM", config_keys=GEMMA_KEYS,
        globals=_rules(GLOBAL, _norms(GLOBAL)), layer=_rules(GEMMA3_LAYER, _norms(GEMMA3_LAYER)),
        config_rule=gemma_attention_scale(62), write=WriteRule(gemma_27b_layers=62, swa_pattern=6),
    ),
    GGUFArchitecture(
        key="starcoder2", gguf="starcoder2", model_type="starcoder2", hf_class="Starcoder2ForCausalLM",
        config_keys=(*LAYERNORM_KEYS, ("attention.layer_norm_epsilon", "norm_epsilon")),
        globals=_rules(GLOBAL_NORM_BIAS), layer=_rules(STARCODER2_LAYER),
        write=WriteRule(allowed=(("use_bias", (True, None), "llama.cpp's starcoder2 needs every bias"),)),
    ),
    GGUFArchitecture(
        key="stablelm", gguf="stablelm", model_type="stablelm", hf_class="StableLmForCausalLM",
        config_keys=(*LAYERNORM_KEYS, ("attention.layer_norm_epsilon", "layer_norm_eps")),
        globals=_rules(GLOBAL_NORM_BIAS), layer=_rules({**NORMS_BIAS, **ATTENTION, **QKV_BIAS, **GATED_MLP}),
        flags=(TensorFlag("use_qkv_bias", "attn_q.bias", True, ("attn_k.bias", "attn_v.bias")),
               TensorFlag("use_parallel_residual", "ffn_norm.weight", False, ("ffn_norm.bias",))),
        write=WriteRule(allowed=(("qk_layernorm", (False, None), "the table maps no per-head q/k norms"),),
                        untied_only=True),
    ),
    GGUFArchitecture(  # llama.cpp reads the epsilon from layer_norm_epsilon, transformers from the rms key
        key="nemotron", gguf="nemotron", model_type="nemotron", hf_class="NemotronForCausalLM",
        config_keys=(*LAYERNORM_KEYS, ("attention.layer_norm_rms_epsilon", "norm_eps"),
                     ("attention.layer_norm_epsilon", "norm_eps")),
        globals=_rules(GLOBAL_NORM_BIAS, _norms(GLOBAL_NORM_BIAS)),
        layer=_rules(NEMOTRON_LAYER, _norms(NEMOTRON_LAYER)), config_rule=nemotron_rope_config,
        write=WriteRule(allowed=(("attention_bias", (False, None), "the table maps no projection biases"),
                                 ("mlp_bias", (False, None), "the table maps no projection biases")),
                        untied_only=True),
    ),
    GGUFArchitecture(
        key="falcon", gguf="falcon", model_type="falcon", hf_class="FalconForCausalLM", config_keys=FALCON_KEYS,
        globals=_rules(FALCON_GLOBAL), layer=_rules(FALCON_LAYER, {"attn_qkv.weight": FALCON_QKV}),
        layer_prefix="transformer.h", always_tied=True, config_rule=falcon_config, write=FALCON_WRITE,
    ),
    GGUFArchitecture(  # Falcon-40B / 180B: two parallel norms per layer
        key="falcon-2norm", gguf="falcon", model_type="falcon", hf_class="FalconForCausalLM", config_keys=FALCON_KEYS,
        globals=_rules(FALCON_GLOBAL), layer=_rules(FALCON_2NORM_LAYER, {"attn_qkv.weight": FALCON_QKV}),
        layer_prefix="transformer.h", always_tied=True, when_tensor=TWO_NORMS, config_rule=falcon_config,
        write=FALCON_WRITE,
    ),
)  # fmt: skip

#: ``general.architecture`` values transformers' GGUF loader maps (``GGUF_CONFIG_MAPPING``) that the table does not
#: read, each with the reason it is refused.
REFUSED_ARCHITECTURES: dict[str, str] = {
    "bloom": "not mapped yet (ALiBi positions and a per-head interleaved fused QKV that transformers reshapes)",
    "gpt2": "not mapped yet (learned positions, Conv1D weights stored transposed)",
    "t5": "an encoder-decoder model (T5 / UMT5), not a causal LM",
    "t5encoder": "an encoder-only model (T5 / UMT5 encoder), not a causal LM",
    "mamba": "a state-space model without attention layers (not mapped)",
    "lfm2": "not mapped yet (hybrid convolution / attention layers with a per-layer KV head list)",
    "gpt-oss": "not mapped yet (MXFP4 experts, interleaved gate/up, attention sinks)",
    "minimax-m2": "not mapped yet (MoE with routing bias)",
    "gemma4": "not mapped yet (Gemma 4 text models: no record in this table)",
    "deci": "not mapped yet (per-layer head and feed-forward counts stored as lists)",
}

#: Every ``general.architecture`` value the table reads, sorted.
KNOWN_ARCHITECTURES: tuple[str, ...] = tuple(sorted({record.gguf for record in ARCHITECTURES}))


def architecture_record(key: str) -> GGUFArchitecture:
    """The record with table key ``key`` (``llama``, ``gemma3`` ...); unknown keys are refused listing the known."""
    for record in ARCHITECTURES:
        if record.key == key:
            return record
    raise KeyError(f"no GGUF architecture record {key!r}; known: {', '.join(r.key for r in ARCHITECTURES)}")
