"""A random-weight Llama-like decoder of chosen width for the Ray scaling benchmark (no transformers).

Layers: RMSNorm, attention (``heads`` query heads, ``kv_heads`` key/value heads, causal, no rotary), RMSNorm, a
SiLU-gated MLP; the same module names as a Hugging Face Llama, so :data:`definition` groups them as qhf does
(q/k/v, o, gate/up, down). Lives in its own module (not the benchmark's ``__main__``) so that Ray worker
processes can import the layer class when they unpickle a layer (the benchmark puts ``benchmarks/`` on their
``PYTHONPATH``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from qlooper import GroupSpec, ModelDefinition
from torch import nn


@dataclass(frozen=True)
class Width:
    """``hidden``, ``inter`` (MLP width), ``heads``/``kv_heads`` (head dim ``hidden // heads``), ``layers``,
    ``vocab``."""

    hidden: int = 512
    inter: int = 1408
    heads: int = 8
    kv_heads: int = 8
    layers: int = 4
    vocab: int = 1024

    @property
    def kv(self) -> int:
        """Key/value projection width."""
        return self.hidden // self.heads * self.kv_heads


class RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class Attention(nn.Module):
    def __init__(self, w: Width) -> None:
        super().__init__()
        self.w = w
        self.q_proj = nn.Linear(w.hidden, w.hidden, bias=False)
        self.k_proj = nn.Linear(w.hidden, w.kv, bias=False)
        self.v_proj = nn.Linear(w.hidden, w.kv, bias=False)
        self.o_proj = nn.Linear(w.hidden, w.hidden, bias=False)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        b, t, _ = x.shape
        d = self.w.hidden // self.w.heads
        q = self.q_proj(x).view(b, t, self.w.heads, d).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.w.kv_heads, d).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.w.kv_heads, d).transpose(1, 2)
        repeat = self.w.heads // self.w.kv_heads
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, self.w.hidden))


class MLP(nn.Module):
    def __init__(self, w: Width) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(w.hidden, w.inter, bias=False)
        self.up_proj = nn.Linear(w.hidden, w.inter, bias=False)
        self.down_proj = nn.Linear(w.inter, w.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, w: Width) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(w.hidden)
        self.self_attn = Attention(w)
        self.post_attention_layernorm = RMSNorm(w.hidden)
        self.mlp = MLP(w)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor]:
        h = hidden + self.self_attn(self.input_layernorm(hidden), attention_mask=attention_mask)
        return (h + self.mlp(self.post_attention_layernorm(h)),)


class Inner(nn.Module):
    def __init__(self, w: Width) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(w.vocab, w.hidden)
        self.layers = nn.ModuleList(Layer(w) for _ in range(w.layers))
        self.norm = RMSNorm(w.hidden)


class LlamaLike(nn.Module):
    """``forward(input_ids [batch, tokens], attention_mask [batch, tokens] | None) -> logits``; weights from
    ``torch.manual_seed(seed)`` with the linear layers' default initialisation."""

    def __init__(self, w: Width, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.model = Inner(w)
        self.lm_head = nn.Linear(w.hidden, w.vocab, bias=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        h = self.model.embed_tokens(input_ids)
        t = input_ids.shape[1]
        mask = torch.ones(t, t, dtype=torch.bool).tril()[None, None]
        if attention_mask is not None:
            mask = mask & attention_mask.bool()[:, None, None, :]
            mask = mask | torch.eye(t, dtype=torch.bool)[None, None]  # padded rows attend to themselves
        for layer in self.model.layers:
            h = layer(h, attention_mask=mask)[0]
        return self.lm_head(self.model.norm(h))


def definition(max_length: int) -> ModelDefinition:
    """The Llama grouping (q/k/v, o, gate/up, down) for :class:`LlamaLike` with rows up to ``max_length``."""
    return ModelDefinition(
        layers_path="model.layers",
        groups=(
            GroupSpec(
                ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
                prev_op="input_layernorm",
                inspect="self_attn",
            ),
            GroupSpec(("self_attn.o_proj",), prev_op="self_attn.v_proj"),
            GroupSpec(("mlp.gate_proj", "mlp.up_proj"), prev_op="post_attention_layernorm", inspect="mlp"),
            GroupSpec(("mlp.down_proj",), prev_op="mlp.up_proj"),
        ),
        unquantized=("input_layernorm", "post_attention_layernorm"),
        max_length=max_length,
        name="llama-like",
    )
