"""Tiny random causal LMs of transformers' model types, quantized end to end (shared by the coverage test
and ``python tests-integration/architecture_coverage.py``, which writes the table in docs/architectures.md).

Each type: a 2-layer, hidden-64 model built from transformers' own config class (random weights), saved,
opened with ``qhf.load``, quantized (GPTQ, and AWQ when some group has a previous op), saved, reloaded with
``qhf.load_quantized``; the reloaded logits must equal the in-memory quantized model's.

``FAMILIES`` is the explicit list CI runs (with the config fields of each tiny model). ``REFUSED`` names every
other type of transformers' ``MODEL_FOR_CAUSAL_LM_MAPPING`` with the stage that stops it and why; the test
fails on a mapping type in neither, so a transformers release that adds a type fails until it is classified.
The script runs every type of the mapping (``--ci``: only ``FAMILIES``): the FAMILIES fields, else the
automatic tiny config of :mod:`tiny_mapping_config`, checks each refusal still happens as documented, and
prints the table (exit status 1 when a type passes or fails otherwise than listed).
"""

from __future__ import annotations

import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "qhf" / "tests"))

MOE = {
    "num_local_experts": 4,
    "num_experts": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
}
MLA = {
    "kv_lora_rank": 32,
    "q_lora_rank": 32,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 16,
    "head_dim": 8,
}

ENCODER_DECODER = {"decoder_layers": 2, "decoder_ffn_dim": 128, "decoder_attention_heads": 4, "encoder_ffn_dim": 128}

# model_type -> extra config fields of its tiny model (MoE and MLA sizes kept small).
FAMILIES: dict[str, dict[str, Any]] = {
    "llama": {},
    "mistral": {},
    "qwen2": {},
    "qwen3": {"head_dim": 16},
    "phi3": {},
    "gemma3_text": {"head_dim": 16, "sliding_window": 32},
    "gemma": {"head_dim": 16},
    "gemma2": {"head_dim": 16},
    "gpt_neox": {},
    "falcon": {},
    "olmo": {},
    "olmo2": {},
    "granite": {},
    "cohere": {},
    "cohere2": {},
    "starcoder2": {},
    "stablelm": {},
    "phi": {},
    "glm": {},
    "glm4": {},
    "smollm3": {},
    "arcee": {},
    "nemotron": {},
    "seed_oss": {},
    "exaone4": {},
    "olmo3": {},
    "mixtral": MOE,
    "qwen2_moe": {**MOE, "shared_expert_intermediate_size": 64},
    "qwen3_moe": MOE,
    "olmoe": MOE,
    "granitemoe": MOE,  # experts fused in the files as block_sparse_moe.input_linear / output_linear
    "phimoe": MOE,
    "deepseek_v2": {**MOE, **MLA, "first_k_dense_replace": 1},
    # grouped routing (8 experts in 4 groups, 2 groups kept) with the default MLA sizes; MLA needs as many KV heads
    # as heads (transformers' own forward fails on the tiny config's 2 KV heads)
    "deepseek_v3": {
        "n_routed_experts": 8,  # not MOE's num_local_experts: an alias of n_routed_experts in this config
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 64,
        "n_group": 4,
        "topk_group": 2,
        "num_key_value_heads": 4,
        "first_k_dense_replace": 1,
    },
    "flex_olmo": MOE,
    "ernie4_5_moe": MOE,
    "glm4_moe": {**MOE, "first_k_dense_replace": 1},
    "gpt_oss": MOE,  # experts fused in the files ([E, H, 2I]), interleaved gate/up, clamped SwiGLU
    "llama4_text": {**MOE, "num_experts_per_tok": 1, "intermediate_size_mlp": 128},  # batched experts [E*T, H]
    # hybrid: layer 0 gated delta-net linear attention, layer 1 full attention
    "qwen3_next": {**MOE, "shared_expert_intermediate_size": 64, "full_attention_interval": 2},
    # blocks return (hidden, state, attentions); rescale_every > 0 is refused by name (in-place weight rescale)
    "rwkv": {"rescale_every": 0},
    # forwards that read weights outside the decoder layers: learned position embeddings (OPT, GPT-BigCode),
    # an embedding layer norm (BLOOM); discovery's replica gives them random values
    "opt": {},
    "bloom": {},
    "gpt_bigcode": {},
    # transformers' Conv1D linears (weight stored [in, out]) and learned position embeddings
    "gpt2": {},
    # an encoder-decoder's *ForCausalLM: the decoder's layers (model.decoder.layers) are counted by decoder_layers
    # (num_hidden_layers maps to encoder_layers); cross-attention never runs and stays dense. BART is post-norm
    # (AWQ: no previous op), mBART pre-norm (AWQ scales into its norms)
    "bart": ENCODER_DECODER,
    "mbart": ENCODER_DECODER,
    # files store attention fused as attention.query_key_value: qhf's source splits it into q/k/v_proj with
    # transformers' own conversion (Split), renames word_embeddings / expert_bias (a buffer)
    "sarvam_moe": {**MOE, "n_group": 1, "topk_group": 1, "head_dim": 16},
    # files store q/k/v_conv1d, concatenated into conv1d on load (Concatenate); 8 heads: b_proj's out_features is
    # num_attention_heads (the automatic 4 does not fit AWQ's 8-column packing; real configs have 32 and more)
    "bailing_hybrid": {
        **MOE,
        "n_group": 1,
        "topk_group": 1,
        "kv_lora_rank": 32,
        "qk_rope_head_dim": 8,
        "qk_nope_head_dim": 8,
        "v_head_dim": 16,
        "head_dim": 16,
        "num_attention_heads": 8,
    },
    # mamba_dt_rank 32: x_proj's out_features is dt_rank + 2 * d_state, and the automatic dt_rank (hidden / 16 = 4)
    # makes 36, which AWQ's 8-column packing cannot hold (real configs: 256 + 32); dt_proj reads dt_rank columns
    "jamba": {"num_local_experts": 4, "num_experts": 4, "num_experts_per_tok": 2, "mamba_dt_rank": 32},
    # the shared expert's width is its own field (default 7688, which no AWQ group of 32 divides)
    "nemotron_h": {
        "num_local_experts": 4,
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 64,
        "n_group": 1,
        "topk_group": 1,
        "head_dim": 16,
        "moe_shared_expert_intermediate_size": 64,
    },
}


# Refused types whose automatic tiny config is not a model of their kind: the fields that make it one.
REFUSED_FIELDS: dict[str, dict[str, Any]] = {
    # Dory's config counts blocks (attention + MLP) and keeps 16 input / 40 recurrent / 16 output layers: three
    # decoder layers, the middle one looped twice (the config class halves num_hidden_layers and the counts)
    "dory": {
        "num_hidden_layers": 6,
        "n_input_layers": 2,
        "n_recurrent_layers": 2,
        "n_output_layers": 2,
        "layer_types": ["sliding_attention", "mlp"] * 3,
        "head_dim": 16,
        "sliding_window": 32,
    },
}

STAGES = ("config", "size", "transformers", "qhf", "fail")
"""Where a type not covered stops (:class:`Refusal`)."""

STAGE_WORDS = {
    "config": "its config class refuses the tiny sizes",
    "size": "composite config: its sub-configs keep their default sizes",
    "transformers": "transformers' own forward fails on the tiny config",
    "qhf": "qhf refuses it by name",
    "fail": "known failure (open work, not yet a refusal by name)",
}


@dataclass(frozen=True)
class Refusal:
    """Why a mapping type is not covered. ``stage``: ``"config"`` (its config class refuses the tiny sizes),
    ``"size"`` (the tiny config still builds more than ``tiny_mapping_config.MAX_PARAMETERS``),
    ``"transformers"`` (transformers' own forward fails on the tiny config), ``"qhf"`` (qhf raises a named
    ``QHFError``) or ``"fail"`` (a known failure with another error: open work, not a refusal by name);
    ``match``: part of that error's message (a plain substring); ``reason``: the doc's words where the stage
    and the error do not say it."""

    stage: str
    match: str
    reason: str = ""

    def describe(self) -> str:
        """The table's words: the reason, else the stage's words and the error."""
        return self.reason or f"{STAGE_WORDS[self.stage]}: {self.match}"


CYCLED_STACKS = (
    "two stacks of decoder layers (L_module.layers, H_module.layers), each run H_cycles x (L_cycles + 1) times per "
    "forward; the loop quantizes one list of layers, each run once (refused by name at discovery)"
)
CARRIED = (
    "each decoder layer hands its topk_indices to the next as prev_topk_indices; the loop replays every layer from "
    "its recorded inputs alone (refused by name at discovery)"
)
LOOPED = (
    "a looped (recurrent-depth) model: a decoder layer runs more than once per forward, and layer-by-layer "
    "quantization calibrates each layer from one call (refused by name at qhf.load)"
)

# Types of MODEL_FOR_CAUSAL_LM_MAPPING not covered, each with its documented reason (from the full run).
REFUSED: dict[str, Refusal] = {
    # hy_v4 and ergo: checked by CI
    "axk1": Refusal("transformers", "The size of tensor a (4) must match the size of tensor b (8) at non-singleton di"),
    "axk2": Refusal(
        "qhf",
        "format 'gemm' cannot hold model.layers.0.input_layernorm.mlp.fc2 [64 x 16] at 4-bit gro",
        "its gated norms' `mlp.fc2` reads `gated_norm_rank` columns (16, as in the default config), fewer than one "
        "AWQ group of 32: AWQ is refused by name before quantizing (GPTQ holds it); keeping that linear dense "
        "under AWQ is open work",
    ),
    "blenderbot": Refusal("size", "the tiny config builds 32,569,984 parameters"),
    "blt": Refusal("size", "the tiny config builds 4,633,189,120 parameters"),
    "camembert": Refusal(
        "transformers", "ne() received an invalid combination of arguments - got (NoneType), but expected"
    ),
    "codegen": Refusal(
        "transformers", "The size of tensor a (16) must match the size of tensor b (64) at non-singleton "
    ),
    "cohere_compass_text": Refusal("config", "'full_attention'"),
    "data2vec-text": Refusal(
        "transformers", "ne() received an invalid combination of arguments - got (NoneType), but expected"
    ),
    "dbrx": Refusal("config", "'DbrxAttentionConfig' object has no attribute 'rope_theta'"),
    "doge": Refusal(
        "qhf",
        "format 'gemm' cannot hold model.layers.0.self_attn.dt_proj [2 x 32] at 4-bit gro",
        "`self_attn.dt_proj` has `num_key_value_heads` outputs (2 here; small Doge configs have fewer than 8 too), "
        "which AWQ's GEMM packing of 8 output columns cannot hold: AWQ is refused by name before quantizing (GPTQ "
        "holds it); keeping that linear dense under AWQ is open work",
    ),
    "dory": Refusal("qhf", "decoder layer 1 ran twice in one forward", LOOPED),
    "dots1": Refusal("config", "empty() takes 1 positional argument but 3 were given"),
    "dots3_note": Refusal("config", "Class validation error for validator 'validate_architecture':"),
    "dots3_note_text": Refusal(
        "config", "'kv_lora_rank' is a per-layer attribute and may vary across layers. Access it vi"
    ),
    "emu3": Refusal("size", "the tiny config builds 8,492,011,520 parameters"),
    "ergo": Refusal(
        "qhf",
        "fused experts (ErgoExperts) do not compute a per-expert MLP this toolkit can unfuse",
        "its fused experts apply a per-expert norm after the MLP (post_expert_norm), which the unfused per-expert "
        "linears do not compute (checked on random weights at discovery)",
    ),
    "gemma3": Refusal("size", "the tiny config builds 3,327,440,128 parameters"),
    "gemma3n": Refusal("config", "ImportError", "its config class raises ImportError (a package transformers wants)"),
    "gemma3n_text": Refusal(
        "config", "The set of layer types producing a cache is different than the set of layer type"
    ),
    "gemma4": Refusal("size", "the tiny config builds 5,681,157,632 parameters"),
    "gemma4_assistant": Refusal("config", "Class validation error for validator 'validate_architecture':"),
    "gemma4_text": Refusal(
        "config", "'head_dim' is a per-layer attribute and may vary across layers. Access it via th"
    ),
    "gemma4_unified": Refusal("size", "the tiny config builds 3,614,738,176 parameters"),
    "gemma4_unified_assistant": Refusal("size", "the tiny config builds 3,476,120,576 parameters"),
    "gemma4_unified_text": Refusal(
        "config", "'head_dim' is a per-layer attribute and may vary across layers. Access it via th"
    ),
    "git": Refusal("size", "the tiny config builds 85,973,504 parameters"),
    "glm_moe_dsa": Refusal("qhf", "is passed to the next layer as `prev_topk_indices`", CARRIED),
    "got_ocr2": Refusal("size", "the tiny config builds 716,033,280 parameters"),
    "gpt_neo": Refusal("config", "Class validation error for validator 'validate_architecture':"),
    "gptj": Refusal("transformers", "The size of tensor a (16) must match the size of tensor b (64) at non-singleton "),
    "hrm_text": Refusal("qhf", "several lists of repeated blocks instead", CYCLED_STACKS),
    "hunyuan_v1_dense": Refusal("config", "unsupported operand type(s) for ** or pow(): 'NoneType' and 'float'"),
    "hunyuan_v1_moe": Refusal("config", "unsupported operand type(s) for ** or pow(): 'NoneType' and 'float'"),
    "hy_v4": Refusal("qhf", "is passed to the next layer as `prev_topk_indices`", CARRIED),
    "kolibri1_1": Refusal("config", "Class validation error for validator 'validate_architecture':"),
    "laguna": Refusal(
        "qhf",
        "model.layers: the discovered groups do not form a definition: ModelDefinition.gr",
        "discovery puts `self_attn.q_proj` in two groups, which is no valid definition",
    ),
    "lfm2_moe": Refusal("config", "'NoneType' object is not subscriptable"),
    "llama4": Refusal("size", "the tiny config builds 107,769,861,120 parameters"),
    "longcat_flash": Refusal(
        "transformers", "The size of tensor a (4) must match the size of tensor b (8) at non-singleton di"
    ),
    "mamba2": Refusal("config", "Class validation error for validator 'validate_architecture':"),
    "ministral": Refusal("config", "unsupported operand type(s) for ** or pow(): 'NoneType' and 'float'"),
    "mllama": Refusal("size", "the tiny config builds 9,775,192,080 parameters"),
    "modernbert-decoder": Refusal("config", "Validation error for field 'pad_token_id':"),
    "moss_transcribe_diarize": Refusal("size", "the tiny config builds 1,064,095,744 parameters"),
    "musicgen": Refusal("config", "'MusicgenConfig' object has no attribute 'dropout'"),
    "musicgen_melody": Refusal("config", "'MusicgenMelodyConfig' object has no attribute 'dropout'"),
    "olmo_hybrid": Refusal(
        "qhf",
        "model.layers: group ['mlp.gate_proj', 'mlp.up_proj'] differs between layer struc",
        "the MLP group's previous op differs between its layer structures (a norm in one, none in the other)",
    ),
    "phi4_multimodal": Refusal("size", "the tiny config builds 870,154,368 parameters"),
    "plbart": Refusal("config", "embed_dim must be divisible by num_heads (got `embed_dim`: 64 and `num_heads`: 1"),
    "prophetnet": Refusal("config", "This model does not support the setting of `num_hidden_layers`. Please set `num_"),
    "qwen3_5": Refusal("size", "the tiny config builds 8,953,803,264 parameters"),
    "qwen3_5_moe": Refusal("size", "the tiny config builds 34,660,610,688 parameters"),
    "qwen4_exp": Refusal("config", "unsupported operand type(s) for //: 'NoneType' and 'NoneType'"),
    "reformer": Refusal("config", "If you want to use `ReformerModelWithLMHead` make sure that `is_decoder=True`."),
    "roberta": Refusal(
        "transformers", "ne() received an invalid combination of arguments - got (NoneType), but expected"
    ),
    "roberta-prelayernorm": Refusal(
        "transformers", "ne() received an invalid combination of arguments - got (NoneType), but expected"
    ),
    "whisper": Refusal("config", "embed_dim must be divisible by num_heads (got `embed_dim`: 64 and `num_heads`: 6"),
    "xlm": Refusal("transformers", "'bool' object has no attribute 'sum'"),
    "xlm-roberta": Refusal(
        "transformers", "ne() received an invalid combination of arguments - got (NoneType), but expected"
    ),
    "xlm-roberta-xl": Refusal(
        "transformers", "ne() received an invalid combination of arguments - got (NoneType), but expected"
    ),
    "xlnet": Refusal("config", "The model xlnet is one of the few models that has no sequence length limit."),
    "xlstm": Refusal("config", "property 'v_head_dim' of 'xLSTMConfig' object has no setter"),
    "xmod": Refusal("transformers", "Input language unknown. Please call `XmodPreTrainedModel.set_default_language()`"),
    "youtu": Refusal(
        "transformers", "The size of tensor a (4) must match the size of tensor b (8) at non-singleton di"
    ),
    "zamba": Refusal("config", "Class validation error for validator 'validate_layer_type':"),
    "zamba2": Refusal("config", "Class validation error for validator 'validate_layer_type':"),
    "zaya": Refusal("config", "Class validation error for validator 'validate_architecture':"),
}

# Types of the mapping that pass with the automatic tiny config (tiny_mapping_config), by the full run.
AUTO_COVERED: tuple[str, ...] = (
    "afmoe",
    "apertus",
    "apertus1p5_text",
    "aria_text",
    "bamba",
    "beam",
    "bert",
    "bert-generation",
    "big_bird",
    "bigbird_pegasus",
    "biogpt",
    "bitnet",
    "blenderbot-small",
    "cohere2_moe",
    "cpmant",
    "ctrl",
    "cwm",
    "deepseek_v32",
    "deepseek_v4",
    "diffllama",
    "electra",
    "ernie",
    "ernie4_5",
    "exaone",
    "exaone_moe",
    "falcon_h1",
    "falcon_mamba",
    "flint",
    "fuyu",
    "glm4_moe_lite",
    "gpt-sw3",
    "gpt_neox_japanese",
    "granite_swa",
    "granitemoe_swa",
    "granitemoehybrid",
    "granitemoeshared",
    "helium",
    "hy_v3",
    "hyperclovax",
    "inkling2_loop_text",
    "inkling2_text",
    "inkling_text",
    "internlm3",
    "iquestcoder",
    "jais2",
    "jetmoe",
    "kimi_linear",
    "kolibri1",
    "lara_mini",
    "lfm2",
    "lfm3",
    "mamba",
    "marian",
    "megatron-bert",
    "mellum",
    "mimo_v2_flash",
    "minicpm3",
    "minicpm5_moe",
    "minimax",
    "minimax_m2",
    "minimax_m3_vl_text",
    "ministral3",
    "moshi",
    "mpt",
    "mvp",
    "nanochat",
    "openai-gpt",
    "pegasus",
    "param2moe",
    "persimmon",
    "qwen3_5_moe_text",
    "qwen3_5_text",
    "qwen4_exp_text",
    "recurrent_gemma",
    "rembert",
    "roc_bert",
    "roformer",
    "sarvam_mla",
    "solar_open",
    "trocr",
    "vaultgemma",
    "xglm",
)

# The refusals CI checks (the full run checks every one).
CI_REFUSED = ("hy_v4", "ergo")


@dataclass
class Outcome:
    """``status`` per method: "pass", "no previous op" (AWQ not run) or the error; ``groups`` of the definition."""

    family: str
    groups: int
    experts: bool
    status: dict[str, str]
    seconds: float
    fields: dict[str, Any] = field(default_factory=dict)


def mapping_types() -> list[str]:
    """Every model type of transformers' ``MODEL_FOR_CAUSAL_LM_MAPPING``, sorted."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def build(directory: Path, family: str, tokenizer: Any, fields: dict[str, Any] | None = None) -> Path:
    """The tiny model of ``family`` saved in ``directory`` (``fields``: its config fields; default FAMILIES',
    else the automatic ones)."""
    from tiny_mapping_config import auto_fields
    from tiny_models import save_tiny_model

    if fields is not None:
        given = fields
    else:
        given = FAMILIES[family] if family in FAMILIES else auto_fields(family)
    return save_tiny_model(directory, family, tokenizer=tokenizer, fill_zero_matrices=True, **given)


def run_family(
    family: str, tokenizer: Any, methods: tuple[str, ...] = ("gptq", "awq"), fields: dict[str, Any] | None = None
) -> Outcome:
    """Quantize, save, reload ``family`` with each method; raises on any error or logit mismatch."""
    import qhf
    from qhf.corpus import bundled_docs
    from qhf.tokenizer import token_blocks

    start = time.perf_counter()
    status: dict[str, str] = {}
    groups, experts = 0, False
    with tempfile.TemporaryDirectory() as tmp:
        src = build(Path(tmp) / "src", family, tokenizer, fields)
        for method in methods:
            qm = qhf.load(src, {"method": method, "bits": 4, "group_size": 32})
            definition = qm.source.definition
            groups = len(definition.groups)
            experts = any(g.is_expert_group for g in definition.groups)
            if method == "awq" and not any(g.prev_op for g in definition.groups):
                status[method] = "no previous op"
                continue
            qm.quantize(token_blocks(qm.tokenizer, bundled_docs("calibration").texts, count=4, length=32))
            out = Path(tmp) / f"out-{method}"
            qm.save(out)
            loaded = qhf.load_quantized(out)
            ids = torch.randint(0, 300, (1, 24), generator=torch.Generator().manual_seed(0))
            with torch.no_grad():  # no cache: a hybrid model's cache is not what this checks
                expected = qm.model(ids, use_cache=False).logits
                got = loaded(ids, use_cache=False).logits
            if not torch.equal(expected, got):
                raise AssertionError(f"{family} {method}: reloaded logits differ by {(expected - got).abs().max()}")
            status[method] = "pass"
    return Outcome(family, groups, experts, status, time.perf_counter() - start, dict(FAMILIES.get(family, {})))


@dataclass
class Verdict:
    """One mapping type's result in the full run: ``stage`` ``"pass"`` or where it stopped, the error text,
    whether that agrees with ``FAMILIES`` / ``REFUSED`` (``expected``)."""

    family: str
    stage: str
    detail: str
    expected: bool
    outcome: Outcome | None = None


class _Timeout(Exception):
    """A type ran past the full run's per-type limit."""


def _one_line(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text[:300]}"


def judge(family: str, tokenizer: Any) -> Verdict:
    """Run ``family`` through every stage (FAMILIES' fields, else the automatic tiny config) and compare."""
    import qhf
    from tiny_mapping_config import transformers_check

    refusal = REFUSED.get(family)

    def verdict(stage: str, detail: str, outcome: Outcome | None = None) -> Verdict:
        if stage == "pass":
            expected = (family in FAMILIES or family in AUTO_COVERED) and refusal is None
        else:
            expected = refusal is not None and refusal.stage == stage and refusal.match in detail
        return Verdict(family, stage, detail, expected, outcome)

    try:
        tiny = transformers_check(family, FAMILIES.get(family, REFUSED_FIELDS.get(family)))
    except Exception as error:  # the config class refuses the tiny sizes
        return verdict("config", _one_line(error))
    if tiny.error is not None:
        return verdict("size" if tiny.error.startswith("the tiny config builds") else "transformers", tiny.error)
    try:
        outcome = run_family(family, tokenizer, fields=tiny.fields)
    except qhf.QHFError as error:
        return verdict("qhf", _one_line(error))
    except Exception as error:  # anything else is a failure of this toolkit, reported with its type
        return verdict("fail", _one_line(error))
    outcome.fields = tiny.fields
    return verdict("pass", f"GPTQ {outcome.status['gptq']}, AWQ {outcome.status['awq']}", outcome)


def table(verdicts: list[Verdict]) -> str:
    rows = ["| model type | MoE | GPTQ | AWQ |", "| --- | --- | --- | --- |"]
    for v in verdicts:
        if v.outcome is not None:
            moe = "yes" if v.outcome.experts else ""
            status = v.outcome.status
            rows.append(f"| `{v.family}` | {moe} | {status.get('gptq', '')} | {status.get('awq', '')} |")
    for v in verdicts:
        if v.outcome is None:
            refusal = REFUSED.get(v.family)
            reason = refusal.describe() if refusal is not None and v.expected else f"unclassified: {v.detail}"
            rows.append(f"| `{v.family}` | | refused ({v.stage}): {reason} | |")
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    from tiny_models import build_tokenizer

    tokenizer = build_tokenizer()
    families = list(FAMILIES) if "--ci" in argv else mapping_types()
    only = [a for a in argv if not a.startswith("--")]
    families = [f for f in families if f in only] if only else families
    verdicts: list[Verdict] = []

    def alarm(_signum: int, _frame: Any) -> None:
        raise _Timeout

    signal.signal(signal.SIGALRM, alarm)
    for family in families:
        start = time.perf_counter()
        signal.alarm(900)
        try:
            verdicts.append(judge(family, tokenizer))
        except _Timeout:
            verdicts.append(Verdict(family, "fail", "ran past 900 s", False))
        finally:
            signal.alarm(0)
        v = verdicts[-1]
        mark = "ok" if v.expected else "UNEXPECTED"
        print(f"{family}: {v.stage} ({mark}) {v.detail} [{time.perf_counter() - start:.1f}s]", flush=True)
    print(table(verdicts))
    passed = sum(v.stage == "pass" for v in verdicts)
    print(
        f"{len(verdicts)} types: {passed} pass, {len(verdicts) - passed} refused; "
        f"{sum(not v.expected for v in verdicts)} unexpected"
    )
    return 0 if all(v.expected for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
