"""The executor abstraction without Ray: in-process shard workers must give the in-process loop's bits."""

import logging

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from qalgos.fallback import FallbackPolicy
from qalgos.spec import QuantSpec
from qlooper import LoopOptions, prepare_calibration, quantize_model
from qlooper.executor import LocalShardExecutor, feed_hooks, hooked_modules, same_bits, shard_ranges
from qlooper.processors.gptq import GPTQProcessor
from torch import nn
from toy_models import DENSE, MLP, MOE, ToyDecoder, calibration_rows, toy_calibration

GPTQ_SPEC = QuantSpec(bits=4, group_size=32)
AWQ_SPEC = QuantSpec(bits=4, group_size=32, sym=False)


def assert_same_run(one, other, model_one: nn.Module, model_other: nn.Module) -> None:
    """Same modules, same packed bytes, same report numbers, same final model parameters."""
    assert sorted(one.modules) == sorted(other.modules)
    for name, done in one.modules.items():
        theirs = other.modules[name].tensors()
        for key, value in done.tensors().items():
            assert value.dtype == theirs[key].dtype and np.array_equal(value, theirs[key]), (name, key)
    for a, b in zip(one.report, other.report, strict=True):
        assert (a.module, a.loss, a.tokens, a.damp, a.fallback, a.notes) == (
            b.module,
            b.loss,
            b.tokens,
            b.damp,
            b.fallback,
            b.notes,
        )
    for (name, p), (_, q) in zip(model_one.state_dict().items(), model_other.state_dict().items(), strict=True):
        assert torch.equal(p, q), name


def test_shard_ranges_are_contiguous_and_balanced() -> None:
    assert shard_ranges(5, 2) == [(0, 3), (3, 5)]
    assert shard_ranges(4, 3) == [(0, 2), (2, 3), (3, 4)]
    assert shard_ranges(1, 3) == [(0, 1)]
    with pytest.raises(ValueError, match="workers: expected at least 1"):
        shard_ranges(4, 0)


def test_feed_hooks_calls_each_kind_in_registration_order() -> None:
    lin = nn.Linear(3, 2)
    seen = []
    lin.register_forward_pre_hook(lambda m, a: seen.append(("pre", a[0].shape)))
    lin.register_forward_pre_hook(lambda m, a, kw: seen.append(("pre-kw", sorted(kw))), with_kwargs=True)
    lin.register_forward_hook(lambda m, a, out: seen.append(("post", out)))
    x = torch.ones(4, 3)
    assert hooked_modules(lin)[0].name == "" and hooked_modules(lin)[0].pre and hooked_modules(lin)[0].post
    feed_hooks(lin, "pre", (x,), {"scale": 2})
    feed_hooks(lin, "post", (x,), {})
    assert seen == [("pre", (4, 3)), ("pre-kw", ["scale"]), ("post", None)]


@pytest.mark.parametrize("workers", [2, 3])
def test_sharded_gptq_matches_in_process_lockstep(workers: int) -> None:
    cal = toy_calibration(n=10, batch_size=2)  # 5 batches: uneven shards
    ref_model, shard_model = ToyDecoder(), ToyDecoder()
    ref = quantize_model(ref_model, DENSE, cal, GPTQ_SPEC, "gptq")
    executor = LocalShardExecutor(workers)
    run = quantize_model(shard_model, DENSE, cal, GPTQ_SPEC, "gptq", options=LoopOptions(executor=executor))
    assert_same_run(ref, run, ref_model, shard_model)
    assert len(executor.times) == 4 and all(t.calls > 0 and t.solve > 0 for t in executor.times)


@pytest.mark.parametrize("workers", [2, 3])
def test_dense_layer_solves_one_job_per_module_and_the_hessian_once_per_worker(workers: int) -> None:
    """q/k/v are 3 jobs (one wave on 3 workers), o 1, gate/up 2, down 1; an input's float32 Hessian is one tensor
    for its modules' jobs, counted (sent) once per worker that solves one of them; the bits equal one process."""
    cal = toy_calibration(n=6, batch_size=2)
    ref_model, shard_model = ToyDecoder(), ToyDecoder()
    ref = quantize_model(ref_model, DENSE, cal, GPTQ_SPEC, "gptq")
    executor = LocalShardExecutor(workers)
    run = quantize_model(shard_model, DENSE, cal, GPTQ_SPEC, "gptq", options=LoopOptions(executor=executor))
    assert_same_run(ref, run, ref_model, shard_model)
    hidden, inter = 64, 128  # toy_models' widths; a float32 [in, in] Hessian and [out, in] weight per job
    weights = 4 * hidden * hidden * 4 + 3 * inter * hidden * 4
    qkv_workers = min(3, workers)  # the q/k/v Hessian goes to each worker that solves one of them
    hessians = (qkv_workers + 1 + 2) * hidden * hidden * 4 + inter * inter * 4
    for times in executor.times:
        assert times.solve_jobs == 7
        assert times.solve_waves == (4 if workers == 3 else 5)  # [q k v] [o] [gate up] [down]; 2: [q k] [v] ...
        assert times.bytes_solve == weights + hessians


def test_sharded_run_ships_only_changed_parameters_and_keeps_idle_workers_current() -> None:
    cal = toy_calibration(n=4, batch_size=2)  # 2 batches over 3 workers: one worker gets empty calls
    ref_model, shard_model = ToyDecoder(), ToyDecoder()
    ref = quantize_model(ref_model, DENSE, cal, GPTQ_SPEC, "gptq")
    executor = LocalShardExecutor(3)
    run = quantize_model(shard_model, DENSE, cal, GPTQ_SPEC, "gptq", options=LoopOptions(executor=executor))
    assert_same_run(ref, run, ref_model, shard_model)
    for times in executor.times:  # each solved weight goes to each worker once, not the layer with every call
        assert 0 < times.bytes_changed < times.layer_bytes * 3 < times.layer_bytes * 3 * times.calls
    idle, busy = (executor._workers[i].layer.state_dict() for i in (2, 0))  # the last layer's quantized weights
    assert idle.keys() == busy.keys() and all(same_bits(v, busy[k]) for k, v in idle.items())


def test_same_bits_tells_signed_zeros_apart_and_a_nan_from_itself_not() -> None:
    nan = torch.tensor([float("nan"), 1.0])
    assert same_bits(nan, nan.clone()) and not torch.equal(nan, nan.clone())
    zero, minus_zero = torch.tensor([0.0]), torch.tensor([-0.0])
    assert not same_bits(zero, minus_zero) and torch.equal(zero, minus_zero)
    assert not same_bits(torch.zeros(2), torch.zeros(2, dtype=torch.float64))


def test_sharded_awq_matches_in_process() -> None:
    cal = toy_calibration()
    ref_model, shard_model = ToyDecoder(), ToyDecoder()
    ref = quantize_model(ref_model, DENSE, cal, AWQ_SPEC, "awq")
    run = quantize_model(shard_model, DENSE, cal, AWQ_SPEC, "awq", options=LoopOptions(executor=LocalShardExecutor(2)))
    assert_same_run(ref, run, ref_model, shard_model)


@pytest.mark.parametrize("method", ["gptq", "awq"])
def test_sharded_moe_with_fallbacks_matches_in_process(method: str) -> None:
    cal = toy_calibration(batch_size=1)
    options = {"fallback": FallbackPolicy(min_token_fraction=0.05)}
    ref_model, shard_model = ToyDecoder(moe=True), ToyDecoder(moe=True)
    ref = quantize_model(ref_model, MOE, cal, GPTQ_SPEC, method, options=LoopOptions(**options))
    executor = LocalShardExecutor(2)
    run = quantize_model(shard_model, MOE, cal, GPTQ_SPEC, method, options=LoopOptions(executor=executor, **options))
    assert any(r.fallback for r in run.report)
    assert_same_run(ref, run, ref_model, shard_model)


def test_ray_executor_without_ray_names_the_extra(monkeypatch) -> None:
    import sys

    from qlooper import ExecutorError
    from qlooper.ray_executor import RayExecutor

    monkeypatch.setitem(sys.modules, "ray", None)  # what an install without qlooper[ray] sees
    with pytest.raises(ExecutorError, match=r"pip install 'qlooper\[ray\]'"):
        RayExecutor("local", workers=2)


def test_broadcast_rounds_double_the_nodes_holding_a_copy() -> None:
    from qlooper.broadcast import broadcast_rounds

    nodes = [f"n{i}" for i in range(8)]  # one worker per node, none on the driver's
    assert broadcast_rounds(nodes, {"driver"}) == [[0], [1, 2], [3, 4, 5, 6], [7]]
    # the driver's node's workers read its copy in round 0; a node's workers share one round
    assert broadcast_rounds(["driver", "a", "a", "b", "c", "driver"], {"driver"}) == [[0, 1, 2, 5], [3, 4]]
    assert broadcast_rounds(["a", "b", "c"], {"driver", "a"}) == [[0, 1, 2]]  # 2 holders serve 2 new nodes
    assert broadcast_rounds(["d", "d"], {"d"}) == [[0, 1]] and broadcast_rounds([], {"d"}) == []
    with pytest.raises(ValueError, match="holders: expected at least one"):
        broadcast_rounds(["a"], set())


class StatisticsOfGPTQ(GPTQProcessor):
    """GPTQ that keeps each input's accumulator state (float64 sums, segment position) before its solve."""

    def __init__(self, spec: QuantSpec) -> None:
        super().__init__(spec)
        self.states: dict[str, dict] = {}

    def process(self, ctx, group):
        for mod in group.modules:
            key = f"{ctx.name}/{mod.input_key}"
            if mod.input_key in self._tasks and key not in self.states:
                self.states[key] = self._tasks[mod.input_key].state_dict()
        return super().process(ctx, group)


def padded_calibration():
    """5 batches of 2 rows of distinct lengths (12-57 tokens): every batch is padded."""
    g = torch.Generator().manual_seed(3)
    rows = [torch.randint(1, 96, (12 + 5 * i,), generator=g).tolist() for i in range(10)]
    return prepare_calibration(rows, batch_size=2, max_length=64, min_length=4)


def small_segments(monkeypatch: pytest.MonkeyPatch, rows: int = 8, chunks: int = 2) -> int:
    """Hessian chunks of ``rows`` rows and segments of ``chunks`` chunks (the real ones: 4096 x 8); returns the
    segment's rows. The in-process workers of LocalShardExecutor see the same constants."""
    from qalgos import hessian

    monkeypatch.setattr(hessian, "MIN_BUFFER_TOKENS", rows)
    monkeypatch.setattr(hessian, "MAX_BUFFER_TOKENS", rows)
    monkeypatch.setattr(hessian, "SEGMENT_CHUNKS", chunks)
    return rows * chunks


@pytest.mark.parametrize("workers", [2, 3])
def test_hessian_segments_formed_on_workers_give_the_in_process_bits(
    workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    segment = small_segments(monkeypatch)
    cal = padded_calibration()
    ref_model, shard_model = ToyDecoder(), ToyDecoder()
    ref_gptq, shard_gptq = StatisticsOfGPTQ(GPTQ_SPEC), StatisticsOfGPTQ(GPTQ_SPEC)
    ref = quantize_model(ref_model, DENSE, cal, None, ref_gptq, format="gptq")
    executor = LocalShardExecutor(workers)
    options = LoopOptions(executor=executor)
    run = quantize_model(shard_model, DENSE, cal, None, shard_gptq, format="gptq", options=options)
    assert_same_run(ref, run, ref_model, shard_model)
    assert ref_gptq.states.keys() == shard_gptq.states.keys() and len(ref_gptq.states) == 16
    for key, state in ref_gptq.states.items():  # the float64 sums themselves, not only what they round to
        theirs = shard_gptq.states[key]
        assert state.keys() == theirs.keys() and state["segments"] >= 3, key
        for field in state:
            assert same_bits(*(torch.as_tensor(s[field]) for s in (state, theirs))), (key, field)
    total = ref.report[0].tokens
    assert total >= 3 * segment and total < sum(b.input_ids.numel() for b in cal.batches)  # padding dropped
    # every layer formed whole segments on the workers and returned their sums
    assert all(t.bytes_sums > 0 and t.statistic > 0 for t in executor.times)


def test_shard_edges_fall_inside_segments_in_the_segment_test() -> None:
    """The segment test above is only a test of the head / tail split if shards start off a segment edge."""
    cal = padded_calibration()
    counts = [int(b.attention_mask.sum()) for b in cal.batches]
    assert all(c < b.input_ids.numel() for c, b in zip(counts, cal.batches, strict=True))
    for workers in (2, 3):
        edges = [sum(counts[:lo]) for lo, _ in shard_ranges(len(counts), workers)[1:]]
        assert edges and all(edge % 16 for edge in edges), (workers, edges)


def flat_mlp_forward(self: MLP, x: torch.Tensor) -> torch.Tensor:
    """The toy MLP reading its input flattened to ``[B*T, in]`` (a shared expert's way): padding rows count."""
    flat = x.reshape(-1, x.shape[-1])
    return self.down_proj(F.silu(self.gate_proj(flat)) * self.up_proj(flat)).view_as(x)


def test_a_flattened_padded_input_is_captured_raw_with_the_same_bits(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    small_segments(monkeypatch)
    monkeypatch.setattr(MLP, "forward", flat_mlp_forward)
    cal = padded_calibration()
    ref_model, shard_model = ToyDecoder(), ToyDecoder()
    ref = quantize_model(ref_model, DENSE, cal, GPTQ_SPEC, "gptq")
    executor = LocalShardExecutor(2)
    with caplog.at_level(logging.INFO, logger="qlooper.executor"):
        run = quantize_model(shard_model, DENSE, cal, GPTQ_SPEC, "gptq", options=LoopOptions(executor=executor))
    assert_same_run(ref, run, ref_model, shard_model)
    raw = [r.message for r in caplog.records if "captured raw" in r.message]
    assert len(raw) == 2 and "mlp.gate_proj" in raw[0] and "mlp.down_proj" in raw[1]  # once each, in layer 0
    assert all(t.bytes_sums > 0 for t in executor.times)  # attention inputs still summed on the workers


def test_hessian_segments_at_the_real_constants_give_the_in_process_bits() -> None:
    from qalgos.hessian import segment_tokens

    rows = calibration_rows(n=1140, length=60)  # about 70k tokens: 2 whole segments of 32768 and a tail
    cal = prepare_calibration(rows, batch_size=60, max_length=64, min_length=4)
    ref_model, shard_model = ToyDecoder(layers=1), ToyDecoder(layers=1)
    ref = quantize_model(ref_model, DENSE, cal, GPTQ_SPEC, "gptq")
    executor = LocalShardExecutor(2)
    run = quantize_model(shard_model, DENSE, cal, GPTQ_SPEC, "gptq", options=LoopOptions(executor=executor))
    assert ref.report[0].tokens > 2 * segment_tokens(64)
    assert_same_run(ref, run, ref_model, shard_model)
    assert executor.times[0].bytes_sums > 0
