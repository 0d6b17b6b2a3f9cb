"""Decoder-layer shapes for the Ray executor's cost model (benchmarks/scaling_model.py): parameters, flops per
token of each forward pass, the distinct hooked inputs whose GPTQ Hessians a layer accumulates, and the GPTQ
solve jobs of each calculation group.

Units: parameters and flops are counts (a multiply-add is 2 flops); widths are features. Attention is counted as
a GQA block (``hidden`` query width, ``kv`` key/value width) whatever the real model uses.
"""

from __future__ import annotations

from dataclasses import dataclass

GRAM_BLOCKS = 8  # qalgos.hessian: the float64 sum is kept as the lower triangle of up to 8 x 8 blocks
GRAM_MIN_BLOCK = 1024
BUFFER_BYTES = 256 * 1024 * 1024  # qalgos.hessian.buffer_tokens: 256 MiB of float32 rows, 256..4096 rows
MAX_BUFFER_TOKENS, MIN_BUFFER_TOKENS = 4096, 256


def chunk_tokens(width: int) -> int:
    """Rows of one float32 Hessian chunk for an input of ``width`` features (qalgos ``buffer_tokens``)."""
    return max(MIN_BUFFER_TOKENS, min(MAX_BUFFER_TOKENS, BUFFER_BYTES // (4 * width)))


def gram_blocks(width: int) -> int:
    """Blocks a side of the lower-triangle float64 sum (qalgos ``gram_edges``)."""
    return max(1, min(GRAM_BLOCKS, width // GRAM_MIN_BLOCK))


def gram_flops_per_token(width: int) -> float:
    """Flops of one token's share of the float32 chunk product ``xᵀx`` over the lower triangle: ``2 in²
    (k + 1) / 2k`` with ``k`` blocks a side (a full product when ``k = 1``)."""
    k = gram_blocks(width)
    return 2.0 * width * width * (k + 1) / (2 * k)


def sum_bytes(width: int) -> float:
    """Bytes of one float64 lower-triangle sum ``[in, in]`` (a segment sum as it travels)."""
    k = gram_blocks(width)
    return 8.0 * width * width * (k + 1) / (2 * k)


def solve_flops(width: int, out: int) -> float:
    """One GPTQ solve of an ``[out, in]`` weight: the damped Cholesky, its inverse and the Cholesky of the
    inverse (about ``in³`` together) plus the column sweep (``out · in²``: each column's error applied to the
    columns after it)."""
    return float(width) ** 3 + float(out) * width * width


@dataclass(frozen=True)
class Input:
    """One distinct hooked input of a group: ``width`` features, read by modules of ``outs`` output widths.
    ``copies``: how many such inputs the layer has (routed experts: ``experts``); ``share``: the fraction of the
    calibration tokens each copy sees (a routed expert: ``top_k / experts``); ``routed``: an expert input."""

    width: int
    outs: tuple[int, ...]
    copies: int = 1
    share: float = 1.0
    routed: bool = False


@dataclass(frozen=True)
class Shape:
    """A decoder stack: ``layers``, ``hidden``, ``kv`` (key/value width), ``inter`` (MLP width of the dense MLP
    or of one expert), ``experts`` (0: dense), ``top_k`` routed and ``shared`` experts per token."""

    name: str
    layers: int
    hidden: int
    kv: int
    inter: int
    experts: int = 0
    top_k: int = 0
    shared: int = 0

    # -- parameters ----------------------------------------------------------------------------------------

    def attention_params(self) -> int:
        """q, k, v and o."""
        return self.hidden * (self.hidden + 2 * self.kv) + self.hidden * self.hidden

    def mlp_params(self) -> int:
        """One MLP (dense) or one expert: gate, up and down."""
        return 3 * self.hidden * self.inter

    def router_params(self) -> int:
        return self.hidden * self.experts

    def layer_params(self) -> int:
        """Every quantized weight of a layer plus the router (norms are negligible)."""
        count = 1 if not self.experts else self.experts + self.shared
        return self.attention_params() + count * self.mlp_params() + self.router_params()

    def routed_params(self) -> int:
        """The routed experts' weights (0 for a dense layer)."""
        return self.experts * self.mlp_params()

    # -- forwards ------------------------------------------------------------------------------------------

    def attention_flops(self, context: int) -> tuple[float, float]:
        """Per token: (q/k/v projections, the rest of attention: causal scores and values over ``context``
        tokens on average half a row, and o)."""
        qkv = 2.0 * self.hidden * (self.hidden + 2 * self.kv)
        scores = 2.0 * 2 * self.hidden * context / 2
        return qkv, scores + 2.0 * self.hidden * self.hidden

    def mlp_flops(self) -> tuple[float, float]:
        """Per token through one MLP/expert: (gate and up, down)."""
        return 4.0 * self.hidden * self.inter, 2.0 * self.hidden * self.inter

    def token_pass_flops(self, context: int) -> list[float]:
        """Flops per calibration token of each token-sharded forward call of the layer, as the sharded path
        runs it: one capture per group, each up to the group's last module, then the replay. Dense: up to v,
        to o, to up, to down, replay. MoE: the expert groups' captures run the whole layer (routed experts:
        ``top_k`` per token; router and shared experts included)."""
        qkv, attn = self.attention_flops(context)
        gate_up, down = self.mlp_flops()
        if not self.experts:
            full = qkv + attn + gate_up + down
            return [qkv, qkv + attn, qkv + attn + gate_up, full, full]
        ffn = (self.top_k + self.shared) * (gate_up + down) + 2.0 * self.hidden * self.experts
        full = qkv + attn + ffn
        return [qkv, qkv + attn, full, full, full]

    def token_pass_flops_experts_sharded(self, context: int) -> tuple[list[float], float]:
        """With routed experts sharded over workers: (flops per calibration token of each token-sharded call:
        attention, router and shared experts only; flops per routed (token, expert) pair on the expert's owner:
        gate/up for the down capture, the whole expert for the replay)."""
        qkv, attn = self.attention_flops(context)
        gate_up, down = self.mlp_flops()
        router = 2.0 * self.hidden * self.experts
        shared_full = self.shared * (gate_up + down)
        token = [qkv, qkv + attn, qkv + attn + router, qkv + attn + router + shared_full]
        token.append(qkv + attn + router + shared_full)
        return token, gate_up + (gate_up + down)

    # -- statistics and solves -----------------------------------------------------------------------------

    def groups(self) -> list[list[Input]]:
        """The distinct hooked inputs of each calculation group, in group order (q/k/v, o, gate/up, down)."""
        attention = [[Input(self.hidden, (self.hidden, self.kv, self.kv))], [Input(self.hidden, (self.hidden,))]]
        if not self.experts:
            mlp = [[Input(self.hidden, (self.inter, self.inter))], [Input(self.inter, (self.hidden,))]]
            return attention + mlp
        share = self.top_k / self.experts
        gate_up = [Input(self.hidden, (self.inter, self.inter), self.experts, share, routed=True)]
        down = [Input(self.inter, (self.hidden,), self.experts, share, routed=True)]
        if self.shared:
            gate_up.append(Input(self.hidden, (self.inter, self.inter), self.shared))
            down.append(Input(self.inter, (self.hidden,), self.shared))
        return [*attention, gate_up, down]


DENSE_70B = Shape("70B dense (Llama-3-70B shapes)", layers=80, hidden=8192, kv=1024, inter=28672)
MOE_600B = Shape(
    "600B MoE (DeepSeek-V3-like shapes)", layers=61, hidden=7168, kv=1024, inter=2048, experts=256, top_k=8, shared=1
)
SMOLLM2 = Shape("SmolLM2-135M", layers=30, hidden=576, kv=192, inter=1536)
