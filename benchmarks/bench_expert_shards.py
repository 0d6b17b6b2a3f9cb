"""Bytes a sharded GPTQ run moves per MoE layer, with the experts token-sharded (every worker holds every expert)
against sharded over owners (qlooper.expert_shards), on in-process shard workers; the bits are checked equal.

Counted as pickled bytes (what Ray would serialize): the layer copy shipped to each worker, every call's
arguments (batches, changed parameters, owner jobs, output tables) and every result (recordings, replay
outputs, solve results), per layer, averaged over the layers. Models: the tests' toy MoE (4 experts of
64 -> 128, top-1, 4 layers) and a random Mixtral-like MoE (16 experts of 128 -> 256, top-2, softmax routing
weights and ``index_add_``, 2 layers). Also prints the process CPU seconds of each run.

Usage: ``python benchmarks/bench_expert_shards.py`` (needs packages/qlooper/tests on ``sys.path``: added here).
"""

from __future__ import annotations

import pickle
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from qalgos.spec import QuantSpec
from qlooper import GroupSpec, LoopOptions, ModelDefinition, prepare_calibration, quantize_model
from qlooper.executor import LocalShardExecutor
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "qlooper" / "tests"))
from toy_models import MOE, ToyDecoder, toy_calibration

SPEC = QuantSpec(bits=4, group_size=32)
H, INTER, E, VOCAB = 128, 256, 16, 200


class Expert(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(H, INTER, bias=False), nn.Linear(H, INTER, bias=False)
        self.down_proj = nn.Linear(INTER, H, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    """Top-2 of 16 experts, softmax routing weights, outputs combined with ``index_add_`` (Mixtral's way)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Linear(H, E, bias=False)
        self.experts = nn.ModuleList(Expert() for _ in range(E))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, H)
        weights, chosen = torch.softmax(self.gate(flat), -1).topk(2, dim=-1)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            token, slot = torch.where(chosen == e)
            if token.numel():
                out.index_add_(0, token, expert(flat[token]) * weights[token, slot, None])
        return out.view_as(x)


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(H)
        self.attn = nn.Linear(H, H)
        self.mlp = Block()

    def forward(self, h: torch.Tensor, attention_mask: Any = None) -> tuple[torch.Tensor]:
        h = h + self.attn(self.norm(h))
        return (h + self.mlp(h),)


class Decoder(nn.Module):
    def __init__(self, layers: int = 2) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(VOCAB, H)
        self.layers = nn.ModuleList(Layer() for _ in range(layers))

    def forward(self, input_ids: torch.Tensor, attention_mask: Any = None) -> torch.Tensor:
        h = self.embed(input_ids)
        for layer in self.layers:
            h = layer(h)[0]
        return h


BIG = ModelDefinition(
    layers_path="layers",
    groups=(
        GroupSpec(("attn",)),
        GroupSpec(("mlp.experts.#.gate_proj", "mlp.experts.#.up_proj")),
        GroupSpec(("mlp.experts.#.down_proj",)),
    ),
    unquantized=("norm", "mlp.gate"),
    name="random-moe-16",
)


class CountingExecutor(LocalShardExecutor):
    """Pickled bytes per layer: ``ship`` (layer copies), ``out`` (call arguments), ``back`` (results)."""

    def __init__(self, workers: int, shard_experts: bool) -> None:
        super().__init__(workers, shard_experts=shard_experts)
        self.moved: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))

    def _ship(self, key: str, layer: nn.Module) -> None:
        self.moved[self._index]["ship"] += len(pickle.dumps(layer)) * self.workers
        super()._ship(key, layer)

    def _call(self, method: str, per_worker: Any, during: str) -> list[Any]:
        results = super()._call(method, per_worker, during)
        self.moved[self._index]["out"] += sum(len(pickle.dumps(args)) for args in per_worker)
        self.moved[self._index]["back"] += sum(len(pickle.dumps(r)) for r in results)
        return results


def run(model_fn: Any, definition: ModelDefinition, cal: Any, workers: int | None, shard: bool = True) -> Any:
    model = model_fn()
    executor = CountingExecutor(workers, shard) if workers else None
    cpu = time.process_time()
    quantize_model(model, definition, cal, SPEC, "gptq", options=LoopOptions(executor=executor))
    return model, executor, time.process_time() - cpu


def main() -> None:
    big_rows = torch.randint(1, VOCAB, (16, 48), generator=torch.Generator().manual_seed(3)).tolist()
    cases = [
        ("toy MoE (4 experts, top-1)", lambda: ToyDecoder(moe=True), MOE, toy_calibration(n=16, batch_size=2)),
        ("random MoE (16 experts, top-2)", Decoder, BIG, prepare_calibration(big_rows, batch_size=2, max_length=64)),
    ]
    columns = "model | workers | experts | layer ship MB | calls out MB | results back MB | total MB | CPU s | same"
    print(f"| {columns} |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for label, model_fn, definition, cal in cases:
        ref, _, _ = run(model_fn, definition, cal, None)
        for workers in (2, 4):
            for shard in (False, True):
                model, executor, cpu = run(model_fn, definition, cal, workers, shard)
                pairs = zip(ref.state_dict().values(), model.state_dict().values(), strict=True)
                same = all(torch.equal(a, b) for a, b in pairs)
                layers = len(executor.moved)
                mb = {k: sum(m[k] for m in executor.moved.values()) / layers / 2**20 for k in ("ship", "out", "back")}
                print(
                    f"| {label} | {workers} | {'owners' if shard else 'everywhere'} | {mb['ship']:.2f} | "
                    f"{mb['out']:.2f} | {mb['back']:.2f} | {sum(mb.values()):.2f} | {cpu:.1f} | {same} |"
                )


if __name__ == "__main__":
    main()
