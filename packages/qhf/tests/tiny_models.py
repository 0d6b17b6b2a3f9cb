"""Tiny models and a tiny tokenizer built in the test (no hub): configs of every supported family."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

VOCAB = 320
TEXT_FIELDS: dict[str, Any] = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    tie_word_embeddings=False,
    bos_token_id=0,
    eos_token_id=1,
    pad_token_id=None,
)
"""The config fields of every tiny model's text stack (2 layers, hidden 64, grouped-query attention)."""


def tiny_config(model_type: str, **overrides: Any) -> Any:
    """A 2-layer, hidden-64 config of ``model_type`` with grouped-query attention."""
    from transformers import AutoConfig

    common: dict[str, Any] = dict(TEXT_FIELDS)
    if model_type in ("qwen3", "gemma3_text"):
        common["head_dim"] = 16
    if model_type == "gemma3_text":
        common["sliding_window"] = 32
    common.update(overrides)
    return AutoConfig.for_model(model_type, **common)


def build_tokenizer(with_specials: bool = True) -> Any:
    """A byte-level BPE tokenizer (VOCAB entries) trained on a slice of CPython's bundled docs."""
    from qhf.corpus import bundled_docs
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<s>", "</s>", "<unk>"] if with_specials else []
    tok = Tokenizer(models.BPE(unk_token="<unk>" if with_specials else None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(bundled_docs("calibration").texts[:6], trainer=trainer)
    kwargs = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"} if with_specials else {}
    return PreTrainedTokenizerFast(tokenizer_object=tok, **kwargs)


def save_tiny_model(
    directory: Path,
    model_type: str,
    *,
    seed: int = 0,
    shard: str | None = None,
    tokenizer: Any = None,
    dtype: torch.dtype = torch.float32,
    norms: float = 0.0,
    fill_zero_matrices: bool = False,
    **overrides: Any,
) -> Path:
    """Random weights (seeded) for a tiny ``model_type`` model saved with its tokenizer in ``directory``;
    ``norms`` > 0 adds ``N(0, norms²)`` to every 1-D weight (norms are otherwise at their initial value);
    ``fill_zero_matrices``: a weight matrix the model's init leaves all zero (AFMoE's router) gets ``N(0, 0.08²)``
    values, as a trained checkpoint's would (an all-zero dense matrix is refused at save: ``VALUE-DENSE``)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_config(model_type, **overrides), dtype=torch.float32)
    with torch.no_grad():  # larger than the default init so that quantization error is visible in logits
        for name, param in model.named_parameters():
            if name.endswith("proj.weight"):
                param.normal_(0.0, 0.08)
            elif norms > 0 and name.endswith("weight") and param.dim() == 1:
                param.add_(torch.randn_like(param) * norms)
            elif fill_zero_matrices and name.endswith("weight") and param.dim() >= 2 and not param.any():
                param.normal_(0.0, 0.08)
    model = model.to(dtype)
    kwargs = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(directory, **kwargs)
    (tokenizer if tokenizer is not None else build_tokenizer()).save_pretrained(directory)
    return directory
