"""Bytes a sharded GPTQ run moves per MoE layer, with the experts token-sharded (every worker holds every expert)
against sharded over owners (qlooper.expert_shards), on in-process shard workers; the bits are checked equal.

Counted as pickled bytes (what Ray would serialize): the layer copy shipped to each worker, every call's
arguments (batches, changed parameters, owner jobs, output tables) and every result (recordings, replay
outputs, solve results), per layer, averaged over the layers. Models: the tests' toy MoE decoder (4 layers,
hidden 64, experts of 64 -> 128): 4 experts with top-1 routing, and 16 experts with top-2 routing (softmax
weights, ``index_add_``, Mixtral's way). Also prints the process CPU seconds of each run.

Usage: ``python benchmarks/bench_expert_shards.py`` (packages/qlooper/tests is put on ``sys.path`` here).
"""

from __future__ import annotations

import pickle
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from qalgos.spec import QuantSpec
from qlooper import LoopOptions, quantize_model
from qlooper.executor import LocalShardExecutor
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "qlooper" / "tests"))
from toy_models import MOE, ToyDecoder, toy_calibration

SPEC = QuantSpec(bits=4, group_size=32)


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


def run(experts: int, top_k: int, workers: int | None, shard: bool = True) -> tuple[nn.Module, Any, float]:
    model = ToyDecoder(moe=True, top_k=top_k, experts=experts)
    executor = CountingExecutor(workers, shard) if workers else None
    cpu = time.process_time()
    quantize_model(
        model, MOE, toy_calibration(n=16, batch_size=2), SPEC, "gptq", options=LoopOptions(executor=executor)
    )
    return model, executor, time.process_time() - cpu


def main() -> None:
    print("| model | workers | experts | layer ship MB | calls out MB | results back MB | total MB | CPU s | same |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for experts, top_k in ((4, 1), (16, 2)):
        ref, _, _ = run(experts, top_k, None)
        for workers in (2, 4):
            for shard in (False, True):
                model, executor, cpu = run(experts, top_k, workers, shard)
                pairs = zip(ref.state_dict().values(), model.state_dict().values(), strict=True)
                same = all(torch.equal(a, b) for a, b in pairs)
                layers = len(executor.moved)
                mb = {k: sum(m[k] for m in executor.moved.values()) / layers / 2**20 for k in ("ship", "out", "back")}
                where = "owners" if shard else "everywhere"
                numbers = " | ".join(f"{v:.2f}" for v in (mb["ship"], mb["out"], mb["back"], sum(mb.values())))
                print(
                    f"| toy MoE, {experts} experts, top-{top_k} | {workers} | {where} | {numbers} | {cpu:.1f} | {same}"
                )


if __name__ == "__main__":
    main()
