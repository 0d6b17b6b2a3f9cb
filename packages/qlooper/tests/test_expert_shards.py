"""MoE experts sharded over in-process shard workers: each owner solves only its experts, bit for bit one process."""

import pytest
import torch
from qalgos.fallback import FallbackPolicy
from qalgos.spec import QuantSpec
from qlooper import ExecutorError, LoopOptions, quantize_model
from qlooper.executor import LocalShardExecutor
from qlooper.expert_shards import ExpertStandIn, OwnerJob, StandInState, expert_owners, fingerprint, meta_copy
from test_executor import assert_same_run
from toy_models import MLP, MOE, ToyDecoder, toy_calibration

SPEC = QuantSpec(bits=4, group_size=32)
POLICY = FallbackPolicy(min_token_fraction=0.05)  # experts 1 and 2 see few tokens, 3 none: RTN on their owners


class RecordingExecutor(LocalShardExecutor):
    """Keeps every owner job it sends (per worker) so a test can check what each worker received."""

    def __init__(self, workers: int, **kwargs) -> None:
        super().__init__(workers, **kwargs)
        self.jobs: list[dict[int, OwnerJob]] = []

    def _call(self, method, per_worker, during, shared=None):
        if method == "run" and per_worker and isinstance(per_worker[0][1], OwnerJob):
            self.jobs.append({w: args[1] for w, args in enumerate(per_worker)})
        return super()._call(method, per_worker, during, shared)


def reference(cal, method: str = "gptq", **options):
    model = ToyDecoder(moe=True)
    return model, quantize_model(model, MOE, cal, SPEC, method, options=LoopOptions(fallback=POLICY, **options))


@pytest.mark.parametrize("workers", [2, 3, 4, 6])
def test_experts_on_their_owners_give_one_process_bits(workers: int) -> None:
    cal = toy_calibration(n=10, batch_size=2)  # 5 batches with padding; 6 workers: one gets no batch
    ref_model, ref = reference(cal)
    executor = RecordingExecutor(workers)
    model = ToyDecoder(moe=True)
    run = quantize_model(model, MOE, cal, SPEC, "gptq", options=LoopOptions(executor=executor, fallback=POLICY))
    assert any(r.fallback for r in run.report) and any(r.expert is not None and not r.fallback for r in run.report)
    assert_same_run(ref, run, ref_model, model)
    owners = expert_owners(range(4), workers)
    by_worker = [sorted(e for e, w in owners.items() if w == i) for i in range(workers)]
    assert [e for w in by_worker for e in w] == [0, 1, 2, 3]  # contiguous blocks in index order
    for layer in range(4):
        row = executor.describe()["moe_experts"][f"model.layers.{layer}"]
        assert row == {"sharded": True, "container": "mlp.experts", "experts_by_worker": by_worker}
    assert len(executor.jobs) == 4  # one round of owner jobs per layer
    full = sum(v.numel() * v.element_size() for v in ToyDecoder(moe=True).model.layers[0].state_dict().values())
    for jobs, times in zip(executor.jobs, executor.times, strict=True):
        assert sorted(jobs) == [w for w in range(workers) if by_worker[w]]  # only owners get a job
        for w, job in jobs.items():
            assert sorted(job.experts) == by_worker[w] == sorted(job.calls)  # its experts' weights and calls only
            names = {m[3].split(".mlp.experts.")[1].split(".")[0] for _i, _s, ms in job.groups for m in ms}
            assert names == {str(e) for e in by_worker[w]}
        assert 0 < times.layer_bytes < full / 2  # the workers' layer copy holds no expert weights
    for worker in executor._workers:
        assert not any(".experts." in k for k in worker.layer.state_dict())
        assert all(isinstance(worker.layer.mlp.experts[e], ExpertStandIn) for e in range(4))


@pytest.mark.parametrize("shard_experts", [True, False])
def test_top2_routing_with_index_add_gives_one_process_bits(shard_experts: bool) -> None:
    """Top-2 routing calls each expert on a fresh temporary (``flat[token]``) that is freed before the next
    expert's: token-sharded recording once took a reused id for the same tensor (a wrong expert input)."""
    cal = toy_calibration(n=10, batch_size=2)
    ref_model = ToyDecoder(moe=True, top_k=2)
    ref = quantize_model(ref_model, MOE, cal, SPEC, "gptq", options=LoopOptions(fallback=POLICY))
    model, executor = ToyDecoder(moe=True, top_k=2), LocalShardExecutor(3, shard_experts=shard_experts)
    run = quantize_model(model, MOE, cal, SPEC, "gptq", options=LoopOptions(executor=executor, fallback=POLICY))
    assert_same_run(ref, run, ref_model, model)
    assert bool(executor.describe()["moe_experts"]) == shard_experts


def test_recorded_calls_keep_one_process_order_and_shapes() -> None:
    cal = toy_calibration(n=10, batch_size=1)
    executor = RecordingExecutor(3)
    quantize_model(ToyDecoder(moe=True), MOE, cal, SPEC, "gptq", options=LoopOptions(executor=executor))
    job = executor.jobs[0][0]  # worker 0 owns experts 0 and 1 in layer 0
    for calls in job.calls.values():
        batches = [b for b, _args, _kwargs in calls]
        assert batches == sorted(batches)  # batch order; one call per batch in the top-1 toy, never merged
    assert (
        sum(args[0].shape[0] for b, args, _ in job.calls[0])
        + sum(args[0].shape[0] for b, args, _ in job.calls[1])
        + sum(args[0].shape[0] for b, args, _ in executor.jobs[0][1].calls[2])
        == cal.total_tokens
    )


def test_without_expert_sharding_every_worker_holds_every_expert() -> None:
    cal = toy_calibration(n=6, batch_size=2)
    ref_model, ref = reference(cal)
    executor = RecordingExecutor(2, shard_experts=False)
    model = ToyDecoder(moe=True)
    run = quantize_model(model, MOE, cal, SPEC, "gptq", options=LoopOptions(executor=executor, fallback=POLICY))
    assert_same_run(ref, run, ref_model, model)
    assert executor.jobs == [] and executor.describe()["moe_experts"] == {}
    assert any(".experts.0." in k for k in executor._workers[1].layer.state_dict())


@pytest.mark.parametrize(
    ("method", "options", "reason"),
    [
        ("awq", {}, "method 'awq' does not shard experts"),
        ("gptq", {"true_sequential": False}, "true_sequential=False"),
    ],
)
def test_unhandled_layers_keep_token_sharding_and_say_why(method: str, options: dict, reason: str) -> None:
    cal = toy_calibration(n=6, batch_size=2)
    ref_model, ref = reference(cal, method, **options)
    executor = RecordingExecutor(2)
    model = ToyDecoder(moe=True)
    opts = LoopOptions(executor=executor, fallback=POLICY, **options)
    run = quantize_model(model, MOE, cal, SPEC, method, options=opts)
    assert_same_run(ref, run, ref_model, model)
    assert executor.jobs == []
    row = executor.describe()["moe_experts"]["model.layers.2"]
    assert row["sharded"] is False and reason in row["reason"]


class LosesWorkers(RecordingExecutor):
    """Replaces worker ``index`` with a fresh one before layer 1's owner jobs and before its replay (after its
    stand-ins got their output tables): what RayExecutor does for a lost worker, minus the process."""

    def __init__(self, workers: int, index: int) -> None:
        super().__init__(workers)
        self.index, self.replaced = index, []

    def _call(self, method, per_worker, during, shared=None):
        if self._index == 1 and (method, during.split()[0]) in {("run", "expert"), ("replay", "replay")}:
            if method not in self.replaced:
                self.replace_worker(self.index)
                self.replaced.append(method)
        return super()._call(method, per_worker, during, shared)


def test_a_replaced_worker_gets_its_experts_and_tables_and_changes_nothing() -> None:
    cal = toy_calibration(n=10, batch_size=2)
    ref_model, ref = reference(cal)
    executor = LosesWorkers(2, index=1)
    model = ToyDecoder(moe=True)
    run = quantize_model(model, MOE, cal, SPEC, "gptq", options=LoopOptions(executor=executor, fallback=POLICY))
    assert executor.replaced == ["run", "replay"]
    assert_same_run(ref, run, ref_model, model)


def test_a_stand_in_refuses_an_input_it_did_not_record() -> None:
    expert, state = MLP(), StandInState()
    stand_in = ExpertStandIn(5, meta_copy(expert), state)
    x = torch.randn(3, 64)
    assert stand_in(x).shape == (3, 64) and not stand_in(x).any()  # idle: zeros of the expert's output shape
    state.mode, state.outputs = "replay", {(5, fingerprint((x,), {})): expert(x)}
    assert torch.equal(stand_in(x.clone()), expert(x))
    with pytest.raises(ExecutorError, match="expert 5: received an input that was not recorded"):
        stand_in(x + 1)
    with pytest.raises(ExecutorError, match="reached 'gate_proj' of an expert directly"):
        stand_in.gate_proj  # noqa: B018
    assert not list(stand_in.parameters())


def test_per_module_specs_reach_the_owners() -> None:
    from qlooper import GPTQProcessor

    cal = toy_calibration(n=6, batch_size=2)
    widths = {"model.layers.1.mlp.experts.0.down_proj": QuantSpec(bits=8, group_size=32)}
    runs = []
    for executor in (None, LocalShardExecutor(2)):
        model = ToyDecoder(moe=True)
        processor = GPTQProcessor(SPEC, module_specs=widths)
        options = LoopOptions(executor=executor, fallback=POLICY)
        runs.append((model, quantize_model(model, MOE, cal, None, processor, format="gptq", options=options)))
    (ref_model, ref), (model, run) = runs
    assert_same_run(ref, run, ref_model, model)
    assert run.report_for("model.layers.1.mlp.experts.0.down_proj").bits == 8
