"""qlooper loop overheads on a toy 8-layer decoder (CPU). Prints tables; asserts nothing about time.

1. Whole-loop wall time beside the sum of its algorithm calls (GPTQ: ``add_batch`` + ``quantize``; AWQ:
   ``search_scales`` + ``search_clip`` + ``quantize_awq``; RTN: ``quantize_rtn``), measured in the same run.
2. Checkpoint overhead at ``interval="layer:1"``: GPTQ with and without a qcheckpoint store, side by side,
   and the time spent inside the checkpoint code of one checkpointed run (identity, layer copies, commits,
   fsyncs) as a share of that run's time (goal <= 5%); the second figure is robust to a busy machine.
3. Peak resident memory growth during a GPTQ run beside one layer's parameters + the input cache.

Run: ``python benchmarks/bench_qlooper_loop.py`` (about a minute on an idle 2-core machine).
"""

from __future__ import annotations

import gc
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import psutil
import qlooper.processors.awq as awq_proc
import qlooper.processors.gptq as gptq_proc
import qlooper.processors.weight_only as wo_proc
import qlooper.resume as resume
import torch
import torch.nn.functional as F
from qalgos import awq as qawq
from qalgos.gptq import GPTQ
from qalgos.rtn import quantize_rtn
from qalgos.spec import QuantSpec
from qcheckpoint import CheckpointConfig
from qlooper import GroupSpec, ModelDefinition, prepare_calibration, quantize_model
from torch import nn

HIDDEN, INTER, LAYERS, VOCAB, HEADS = 256, 512, 8, 512, 8
REPEATS = 2


class Norm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(HIDDEN))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class Attn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(HIDDEN, HIDDEN, bias=False) for _ in range(4))

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        b, t, _ = x.shape
        split = [p(x).view(b, t, HEADS, -1).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj)]
        y = F.scaled_dot_product_attention(*split, attn_mask=attention_mask)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, HIDDEN))


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(HIDDEN, INTER, bias=False)
        self.up_proj = nn.Linear(HIDDEN, INTER, bias=False)
        self.down_proj = nn.Linear(INTER, HIDDEN, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.input_layernorm, self.self_attn = Norm(), Attn()
        self.post_attention_layernorm, self.mlp = Norm(), Mlp()

    def forward(self, h: torch.Tensor, attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor]:
        h = h + self.self_attn(self.input_layernorm(h), attention_mask=attention_mask)
        return (h + self.mlp(self.post_attention_layernorm(h)),)


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
        self.model.layers = nn.ModuleList(Block() for _ in range(LAYERS))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        t = input_ids.shape[1]
        mask = torch.ones(t, t, dtype=torch.bool).tril()[None, None] & attention_mask.bool()[:, None, None, :]
        mask = mask | torch.eye(t, dtype=torch.bool)[None, None]
        h = self.model.embed_tokens(input_ids)
        for layer in self.model.layers:
            h = layer(h, attention_mask=mask)[0]
        return h


DEFINITION = ModelDefinition(
    layers_path="model.layers",
    groups=(
        GroupSpec(
            ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), prev_op="input_layernorm", inspect="self_attn"
        ),
        GroupSpec(("self_attn.o_proj",), prev_op="self_attn.v_proj"),
        GroupSpec(("mlp.gate_proj", "mlp.up_proj"), prev_op="post_attention_layernorm", inspect="mlp"),
        GroupSpec(("mlp.down_proj",), prev_op="mlp.up_proj"),
    ),
    awq_no_clip=("self_attn.q_proj", "self_attn.k_proj"),
)


def calibration():
    g = torch.Generator().manual_seed(1)
    rows = [torch.randint(1, VOCAB, (96 + 8 * (i % 4),), generator=g).tolist() for i in range(16)]
    return prepare_calibration(rows, batch_size=4)


class Clock:
    """Accumulates seconds spent inside wrapped algorithm calls."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, fn):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        return timed


@contextmanager
def timed_algorithms(clock: Clock):
    """Route the processors' algorithm calls through ``clock`` (restored afterwards)."""
    saved = (gptq_proc.GPTQ, awq_proc.awq, wo_proc.quantize_rtn)

    class TimedGPTQ(GPTQ):
        add_batch = clock.wrap(GPTQ.add_batch)
        quantize = clock.wrap(GPTQ.quantize)

    class TimedAWQ:
        search_scales = staticmethod(clock.wrap(qawq.search_scales))
        search_clip = staticmethod(clock.wrap(qawq.search_clip))
        quantize_awq = staticmethod(clock.wrap(qawq.quantize_awq))
        fold_scales_into_previous = staticmethod(qawq.fold_scales_into_previous)
        scale_consumer_weight = staticmethod(qawq.scale_consumer_weight)

    gptq_proc.GPTQ, awq_proc.awq = TimedGPTQ, TimedAWQ
    try:
        yield
    finally:
        gptq_proc.GPTQ, awq_proc.awq, wo_proc.quantize_rtn = saved


@contextmanager
def timed_checkpointing(clock: Clock):
    """Route the checkpoint extension's work (identity, layer copies, commits) through ``clock``."""
    ext = resume.CheckpointExtension
    saved = (resume.build_identity, ext.on_boundary, ext.on_layer_done, ext.on_start)
    resume.build_identity = clock.wrap(saved[0])
    ext.on_boundary, ext.on_layer_done, ext.on_start = (clock.wrap(f) for f in saved[1:])
    try:
        yield
    finally:
        resume.build_identity, ext.on_boundary, ext.on_layer_done, ext.on_start = saved


def checkpoint_share(cal) -> tuple[float, float]:
    """(total seconds, seconds inside checkpoint code) of one checkpointed GPTQ run, measured in the same run."""
    clock = Clock()
    root = Path(tempfile.mkdtemp(prefix="bench-qlooper-"))
    try:
        with timed_checkpointing(clock):
            start = time.perf_counter()
            quantize_model(
                Decoder(),
                DEFINITION,
                cal,
                QuantSpec(bits=4, group_size=128),
                "gptq",
                checkpoint=CheckpointConfig(path=root / "ckpt"),
            )
            total = time.perf_counter() - start
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return total, clock.seconds


def run_once(method: str, cal, checkpoint: Path | None = None) -> tuple[float, float]:
    """(loop seconds, algorithm seconds) for one fresh model."""
    model = Decoder()
    clock = Clock()
    spec = QuantSpec(bits=4, group_size=128, sym=method != "awq")
    rtn = wo_proc.WeightOnlyProcessor(spec, quantize=clock.wrap(quantize_rtn))
    with timed_algorithms(clock):
        config = CheckpointConfig(path=checkpoint) if checkpoint is not None else None
        start = time.perf_counter()
        quantize_model(
            model,
            DEFINITION,
            cal,
            spec,
            rtn if method == "rtn" else method,
            format="gptq" if method == "rtn" else None,
            checkpoint=config,
        )
        total = time.perf_counter() - start
    return total, clock.seconds


def best_of(method: str, cal, checkpoint: bool = False) -> tuple[float, float]:
    results = []
    for _ in range(REPEATS):
        root = Path(tempfile.mkdtemp(prefix="bench-qlooper-")) if checkpoint else None
        try:
            results.append(run_once(method, cal, root / "ckpt" if root else None))
        finally:
            if root is not None:
                shutil.rmtree(root, ignore_errors=True)
    return min(results)


def peak_rss_growth(cal) -> tuple[int, int]:
    """(peak RSS growth during a GPTQ run, one layer's parameter bytes + input cache bytes)."""
    model = Decoder()
    gc.collect()
    proc = psutil.Process()
    base = proc.memory_info().rss
    peak = [base]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.002)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    quantize_model(model, DEFINITION, cal, QuantSpec(bits=4, group_size=128), "gptq")
    done.set()
    thread.join()
    layer = sum(p.numel() * p.element_size() for p in model.model.layers[0].parameters())
    cache = sum(b.input_ids.numel() * HIDDEN * 4 for b in cal.batches)
    return peak[0] - base, layer + cache


def main() -> None:
    torch.set_num_threads(1)
    cal = calibration()
    run_once("rtn", cal)  # warm up imports and allocator
    print(f"toy decoder: {LAYERS} layers, hidden {HIDDEN}, {cal.total_tokens} calibration tokens, best of {REPEATS}")
    print("(AWQ timed once)\n")
    print("| method | loop s | algorithm calls s | loop / algorithms | loop overhead s |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for method in ("rtn", "gptq", "awq"):
        total, algo = best_of(method, cal) if method != "awq" else run_once(method, cal)  # AWQ: one run (slow)
        print(f"| {method} | {total:.3f} | {algo:.3f} | {total / algo:.2f}x | {total - algo:.3f} |")
    plain, _ = best_of("gptq", cal)
    ckpt, _ = best_of("gptq", cal, checkpoint=True)
    total, inside = checkpoint_share(cal)
    print("\n| GPTQ, interval layer:1 | seconds | ratio to no checkpoint | checkpoint share of total |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| no checkpoint | {plain:.3f} | 1.00x | - |")
    print(
        f"| checkpoint (side by side) | {ckpt:.3f} | {ckpt / plain:.2f}x | {100 * max(ckpt - plain, 0) / ckpt:.1f}% |"
    )
    print(f"| checkpoint (time inside checkpoint code) | {total:.3f} | - | {100 * inside / total:.1f}% |")
    growth, budget = peak_rss_growth(cal)
    print("\n| memory | MiB | ratio to one layer + cache |")
    print("| --- | ---: | ---: |")
    print(f"| one layer params + input cache | {budget / 2**20:.2f} | 1.00x |")
    print(f"| peak RSS growth during GPTQ | {growth / 2**20:.2f} | {growth / budget:.2f}x |")


if __name__ == "__main__":
    main()
