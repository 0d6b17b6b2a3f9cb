"""An in-memory random-weight Llama (transformers' init, seed 0), its qlooper definition and random calibration
ids (seed 1): what the qlooper benchmarks that need a Llama layer of a given shape, not a real model, start from."""

from __future__ import annotations

from typing import Any


def random_llama(
    shape: dict[str, int], layers: int, vocab: int, rows: int, length: int, batch_size: int
) -> tuple[Any, Any, Any]:
    """``(model, definition, calibration)``: a ``LlamaForCausalLM`` of ``shape`` (config fields: hidden size,
    MLP size, heads) with ``layers`` decoder layers and a ``vocab``-token vocabulary, in eval mode without a
    cache; qhf's discovered definition of it; ``rows`` x ``length`` random ids prepared in batches of
    ``batch_size``."""
    import torch
    from qhf.architectures import definition_for
    from qlooper import prepare_calibration
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(**shape, num_hidden_layers=layers, vocab_size=vocab, max_position_embeddings=4096)
    model = LlamaForCausalLM(config).eval()
    model.config.use_cache = False
    definition = definition_for(model, config).definition
    g = torch.Generator().manual_seed(1)
    ids = [torch.randint(0, vocab, (length,), generator=g).tolist() for _ in range(rows)]
    return model, definition, prepare_calibration(ids, batch_size=batch_size, max_length=length)
