"""What the discovery replica is fed: random ``inputs_embeds``, or random token ids through a stand-in embedding.

The replica runs on random ``inputs_embeds [1, T, hidden]`` (the model's own code builds the masks and
rotary embeddings; the vocabulary-sized input embedding stays on meta). Some models cannot run from
``inputs_embeds``: CPM-Ant's forward reads ``input_ids`` only (it builds its segments and prepends its prompt
tokens from the ids), DeepSeek-V4's hash-routed MoE layers pick their experts by token id. When the
``inputs_embeds`` forward fails, discovery runs once more on random token ids ``[1, T]`` (in ``[1, vocab)``)
with the replica's input embedding replaced by :class:`IdEmbedding` (id -> a seeded random row of a
``[64, hidden]`` table, ids modulo 64: no vocabulary-sized table), and records that in the discovery notes.
The loop itself always runs the model on token ids (``qlooper.capture``), so only discovery changes.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .multimodal import text_config

ID_ROWS = 64
"""Rows of the stand-in embedding's table."""


class IdEmbedding(nn.Module):
    """Stand-in input embedding: ``ids [B, T]`` (any integer dtype, any value >= 0) -> ``[B, T, hidden]``, row
    ``id % ID_ROWS`` of a seeded ``N(0, 1)`` table in ``dtype``."""

    def __init__(self, hidden: int, dtype: torch.dtype, generator: torch.Generator) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(ID_ROWS, hidden, generator=generator).to(dtype), requires_grad=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.weight[ids.long() % ID_ROWS]


def embeds_inputs(embeds: torch.Tensor) -> dict[str, Any]:
    """Forward keyword arguments feeding ``embeds [1, T, hidden]``."""
    mask = torch.ones(embeds.shape[:2], dtype=torch.long)
    return {"inputs_embeds": embeds, "attention_mask": mask, "use_cache": False}


def ids_inputs(vocab: int, tokens: int, generator: torch.Generator) -> dict[str, Any]:
    """Forward keyword arguments feeding random token ids ``[1, tokens]`` in ``[1, vocab)``."""
    ids = torch.randint(1, max(vocab, 2), (1, tokens), generator=generator)
    return {"input_ids": ids, "attention_mask": torch.ones(1, tokens, dtype=torch.long), "use_cache": False}


def use_id_embedding(replica: Any, hidden: int, dtype: torch.dtype) -> None:
    """Replace ``replica``'s input embedding (a transformers model's ``set_input_embeddings``) by an
    :class:`IdEmbedding` (seeded)."""
    replica.set_input_embeddings(IdEmbedding(hidden, dtype, torch.Generator().manual_seed(3)))


def vocab_size(config: Any) -> int:
    """The text config's ``vocab_size`` (2 when absent: ids 1 only)."""
    text = text_config(config)
    size = getattr(text, "vocab_size", None)
    return int(size) if isinstance(size, int) and size > 1 else 2


def describe(inputs: dict[str, Any]) -> str:
    """``inputs_embeds [1, 16, 64]`` / ``input_ids [1, 16]``: what a forward was fed."""
    key = "inputs_embeds" if "inputs_embeds" in inputs else "input_ids"
    return f"{key} {list(inputs[key].shape)}"
