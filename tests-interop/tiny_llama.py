"""A tiny Llama (hidden 64, 2 layers) and a tiny byte-level BPE tokenizer, built in the test (no hub).

Four key/value heads of 16 keep every projection's output a multiple of 64: GPT-QModel's AWQ clip search
asserts ``out_features % 64 == 0`` (see docs/interoperability.md), and 3-bit planar needs multiples of 32.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

VOCAB = 320
PROBE = torch.tensor([[0, *range(5, 45)]])


def corpus(count: int = 12) -> list[str]:
    """Plain-English calibration/training text from CPython's bundled pydoc topics (always installed)."""
    from pydoc_data.topics import topics

    texts = [topics[k] for k in sorted(topics)]
    return [t[:1200] for t in texts if len(t) > 400][:count]


def build_tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(6), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def save_tiny_llama(
    directory: Path, *, seed: int = 0, positive_rows: int = 0, hidden_size: int = 64, intermediate_size: int = 128
) -> Path:
    """Seeded random weights saved (float32 safetensors) with the tokenizer in ``directory``.

    ``positive_rows``: the first rows of layer 0's ``up_proj`` are made strictly positive, so an asymmetric
    quantizer gives those groups a true zero point of 0. ``hidden_size``: K of every linear but ``down_proj``;
    ``intermediate_size``: ``down_proj``'s K.
    """
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=1,
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():  # larger than the default init so quantization error shows in the logits
        for name, param in model.named_parameters():
            if name.endswith("proj.weight"):
                param.normal_(0.0, 0.08)
        if positive_rows:
            up = model.model.layers[0].mlp.up_proj.weight
            up[:positive_rows] = up[:positive_rows].abs() + 0.05
    model.save_pretrained(directory)
    build_tokenizer().save_pretrained(directory)
    return directory
