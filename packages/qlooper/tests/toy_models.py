"""Tiny torch decoders built for the tests (no transformers): dense and MoE, hidden 64, 4 layers."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from qalgos.paroquant import ParoSpec
from qlooper import GroupSpec, ModelDefinition, prepare_calibration
from torch import nn

HIDDEN = 64
INTER = 128
HEADS = 4
VOCAB = 96


class RMSNorm(nn.Module):
    """``x / rms(x) * (offset + weight)`` (offset 1.0 imitates Gemma's norms)."""

    def __init__(self, dim: int, offset: float = 0.0) -> None:
        super().__init__()
        self.offset = offset
        self.weight = nn.Parameter(torch.ones(dim) - offset + 0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (self.offset + self.weight)


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.k_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.v_proj = nn.Linear(HIDDEN, HIDDEN, bias=True)
        self.o_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, None]:
        b, t, _ = x.shape
        d = HIDDEN // HEADS
        q = self.q_proj(x).view(b, t, HEADS, d).transpose(1, 2)
        k = self.k_proj(x).view(b, t, HEADS, d).transpose(1, 2)
        v = self.v_proj(x).view(b, t, HEADS, d).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, HIDDEN)), None


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(HIDDEN, INTER, bias=False)
        self.up_proj = nn.Linear(HIDDEN, INTER, bias=False)
        self.down_proj = nn.Linear(INTER, HIDDEN, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MoE(nn.Module):
    """Top-1 routing over ``n`` experts; ``bias`` pushes the router toward expert 0 so others see few tokens.
    ``top_k=2``: each token to its 2 best experts, outputs weighted by the softmax and summed with
    ``index_add_`` (Mixtral's way; expert 3 is still never picked). Experts past the fourth get no bias."""

    def __init__(self, n: int = 4, top_k: int = 1) -> None:
        super().__init__()
        self.top_k = top_k
        self.gate = nn.Linear(HIDDEN, n, bias=True)
        with torch.no_grad():
            self.gate.bias.copy_(torch.tensor([4.0, 0.0, 0.0, -100.0] + [0.0] * max(0, n - 4))[:n])
        self.experts = nn.ModuleList(MLP() for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, HIDDEN)
        if self.top_k > 1:
            weights, chosen = torch.softmax(self.gate(flat), -1).topk(self.top_k, dim=-1)
            summed = torch.zeros_like(flat)
            for e, expert in enumerate(self.experts):
                token, slot = torch.where(chosen == e)
                if token.numel():
                    summed.index_add_(0, token, expert(flat[token]) * weights[token, slot, None])
            return summed.view_as(x)
        choice = self.gate(flat).argmax(-1)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            rows = (choice == e).nonzero().flatten()
            if rows.numel():
                out[rows] = expert(flat[rows])
        return out.view_as(x)


class Layer(nn.Module):
    def __init__(self, moe: bool = False, norm_offset: float = 0.0, top_k: int = 1, experts: int = 4) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(HIDDEN, norm_offset)
        self.self_attn = Attention()
        self.post_attention_layernorm = RMSNorm(HIDDEN, norm_offset)
        self.mlp = MoE(experts, top_k) if moe else MLP()

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor]:
        h = hidden + self.self_attn(self.input_layernorm(hidden), attention_mask=attention_mask)[0]
        return (h + self.mlp(self.post_attention_layernorm(h)),)


class Inner(nn.Module):
    def __init__(self, layers: int, moe: bool, norm_offset: float, top_k: int = 1, experts: int = 4) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList(Layer(moe, norm_offset, top_k, experts) for _ in range(layers))
        self.norm = RMSNorm(HIDDEN)


class ToyDecoder(nn.Module):
    def __init__(
        self,
        layers: int = 4,
        moe: bool = False,
        seed: int = 0,
        norm_offset: float = 0.0,
        top_k: int = 1,
        experts: int = 4,
    ) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.model = Inner(layers, moe, norm_offset, top_k, experts)
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        h = self.model.embed_tokens(input_ids)
        t = input_ids.shape[1]
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        mask = causal[None, None]
        if attention_mask is not None:
            mask = mask & attention_mask.bool()[:, None, None, :]
            mask = mask | torch.eye(t, dtype=torch.bool)[None, None]  # padded rows attend to themselves
        for layer in self.model.layers:
            h = layer(h, attention_mask=mask)[0]
        return self.lm_head(self.model.norm(h))


DENSE = ModelDefinition(
    layers_path="model.layers",
    groups=(
        GroupSpec(
            ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), prev_op="input_layernorm", inspect="self_attn"
        ),
        GroupSpec(("self_attn.o_proj",), prev_op="self_attn.v_proj"),
        GroupSpec(("mlp.gate_proj", "mlp.up_proj"), prev_op="post_attention_layernorm", inspect="mlp"),
        GroupSpec(("mlp.down_proj",), prev_op="mlp.up_proj"),
    ),
    unquantized=("input_layernorm", "post_attention_layernorm"),
    max_length=64,
    awq_no_clip=("self_attn.q_proj", "self_attn.k_proj"),
    name="toy",
)

MOE = ModelDefinition(
    layers_path="model.layers",
    groups=(
        GroupSpec(
            ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), prev_op="input_layernorm", inspect="self_attn"
        ),
        GroupSpec(("self_attn.o_proj",), prev_op="self_attn.v_proj"),
        GroupSpec(("mlp.experts.#.gate_proj", "mlp.experts.#.up_proj")),
        GroupSpec(("mlp.experts.#.down_proj",)),
    ),
    unquantized=("input_layernorm", "post_attention_layernorm", "mlp.gate"),
    max_length=64,
    name="toy-moe",
)


def calibration_rows(n: int = 8, length: int = 24, seed: int = 1) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, VOCAB, (length + (i % 5),), generator=g).tolist() for i in range(n)]


def toy_calibration(n: int = 8, batch_size: int = 2):
    return prepare_calibration(calibration_rows(n), batch_size=batch_size, max_length=64, min_length=4)


#: ParoQuant with a budget small enough for the toy decoder's tests (group 32, 4 rounds, 2 + 1 short epochs).
PARO_SPEC = ParoSpec(group_size=32, krot=4, rotation_epochs=2, finetune_epochs=1, train_samples=96, batch_size=32)
