"""Tiny random causal LMs of many transformers families, quantized end to end (shared by the coverage test
and ``python tests-integration/architecture_coverage.py``, which writes the table in docs/architectures.md).

Each family: a 2-layer, hidden-64 model built from transformers' own config class (random weights), saved,
opened with ``qhf.load``, quantized (GPTQ, and AWQ when some group has a previous op), saved, reloaded with
``qhf.load_quantized``; the reloaded logits must equal the in-memory quantized model's.
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass
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
    "granitemoe": MOE,
    "phimoe": MOE,
    "deepseek_v2": {**MOE, **MLA, "first_k_dense_replace": 1},
    "deepseek_v3": {**MOE, **MLA, "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1},
    "flex_olmo": MOE,
    "ernie4_5_moe": MOE,
    "glm4_moe": {**MOE, "first_k_dense_replace": 1},
    "gpt_oss": MOE,  # experts fused in the files ([E, H, 2I]), interleaved gate/up, clamped SwiGLU
    "gpt2": {},
    "bloom": {},
}

# Families that cannot be quantized, asserted to fail before any work with this part of the message.
EXPECTED_UNSUPPORTED: dict[str, str] = {
    "gpt2": "the discovery forward",  # position embeddings read from the (meta) model; Conv1D weights [in, out]
    "granitemoe": "the weights lack",  # experts stored as input_linear/output_linear: no file-name mapping
    "bloom": "the discovery forward",  # reads its embedding layernorm outside the layers (meta in discovery)
}


@dataclass
class Outcome:
    """``status`` per method: "pass", "no previous op" (AWQ not run) or the error; ``groups`` of the definition."""

    family: str
    groups: int
    experts: bool
    status: dict[str, str]
    seconds: float


def build(directory: Path, family: str, tokenizer: Any) -> Path:
    from tiny_models import save_tiny_model

    return save_tiny_model(directory, family, tokenizer=tokenizer, **FAMILIES[family])


def run_family(family: str, tokenizer: Any, methods: tuple[str, ...] = ("gptq", "awq")) -> Outcome:
    """Quantize, save, reload ``family`` with each method; raises on any error or logit mismatch."""
    import qhf
    from qhf.corpus import bundled_docs
    from qhf.tokenizer import token_blocks

    start = time.perf_counter()
    status: dict[str, str] = {}
    groups, experts = 0, False
    with tempfile.TemporaryDirectory() as tmp:
        src = build(Path(tmp) / "src", family, tokenizer)
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
            with torch.no_grad():
                expected = qm.model(ids).logits
                got = loaded(ids).logits
            if not torch.equal(expected, got):
                raise AssertionError(f"{family} {method}: reloaded logits differ by {(expected - got).abs().max()}")
            status[method] = "pass"
    return Outcome(family, groups, experts, status, time.perf_counter() - start)


def table(outcomes: list[Outcome], failures: dict[str, str]) -> str:
    rows = ["| family | MoE | groups | GPTQ | AWQ |", "| --- | --- | --- | --- | --- |"]
    for o in outcomes:
        moe = "yes" if o.experts else ""
        rows.append(f"| `{o.family}` | {moe} | {o.groups} | {o.status.get('gptq', '')} | {o.status.get('awq', '')} |")
    for family, reason in sorted(failures.items()):
        rows.append(f"| `{family}` | | | not supported: {reason} | |")
    return "\n".join(rows)


def main() -> None:
    from tiny_models import build_tokenizer

    tokenizer = build_tokenizer()
    outcomes, failures = [], {}
    for family in FAMILIES:
        try:
            outcomes.append(run_family(family, tokenizer))
            print(family, outcomes[-1].status, f"{outcomes[-1].seconds:.1f}s", flush=True)
        except Exception as error:  # reported in the table, one line per family
            failures[family] = f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
            print(family, "FAIL", failures[family], flush=True)
    print(table(outcomes, failures))


if __name__ == "__main__":
    main()
