"""A tiny llama model and tokenizer built in the test (no hub), saved as a Hugging Face directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

VOCAB = 320


def build_tokenizer() -> Any:
    """A byte-level BPE tokenizer with VOCAB entries trained on a slice of CPython's bundled docs."""
    from pydoc_data.topics import topics

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
    texts = [topics[k] for k in sorted(topics)[:8]]
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def save_tiny_llama(directory: Path, *, layers: int = 2, seed: int = 0) -> Path:
    """Seeded random weights for a llama with hidden 64, ``layers`` decoder layers; saved with its tokenizer."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(
        "llama",
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
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
    model.save_pretrained(directory)
    build_tokenizer().save_pretrained(directory)
    return directory
