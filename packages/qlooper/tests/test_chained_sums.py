"""The chained reduce: a GPTQ input's Hessian segment sums are added along the workers in segment order (each
worker adds its own to the running sum the previous one passes on), with one process's bits."""

import logging

import pytest
import torch
from qalgos.gptq import GPTQ
from qalgos.hessian import LowerGram, segment_tokens
from qlooper import LoopOptions, quantize_model
from qlooper import executor as executor_module
from qlooper.errors import SegmentsLost
from qlooper.executor import LayerTimes, LocalShardExecutor, chain_parts, same_bits
from qlooper.worker_statistics import HessianRowsHook, RowPlan, ShardRows, Straddle
from test_executor import GPTQ_SPEC, StatisticsOfGPTQ, assert_same_run
from test_straddling_segments import fixed_calibration, segments_of
from torch import nn
from toy_models import DENSE, ToyDecoder

INPUTS_PER_LAYER = 4  # q/k/v, o, gate/up, down: one Hessian each
SUM_BYTES = 3 * 64 * 64 * 8 + 128 * 128 * 8  # one float64 sum of each (hidden 64, down's input 128): one block each


def run_both(workers: int, executor: LocalShardExecutor | None = None, layers: int = 2, segments: int = 6):
    """One process and ``executor`` (default: ``LocalShardExecutor(workers)``, chained) on 12 batches of 8 rows:
    ``segments`` whole segments per input (the caller sets their size)."""
    cal = fixed_calibration(12, tokens=8)
    ref_model, shard_model = ToyDecoder(layers=layers), ToyDecoder(layers=layers)
    ref_gptq, shard_gptq = StatisticsOfGPTQ(GPTQ_SPEC), StatisticsOfGPTQ(GPTQ_SPEC)
    ref = quantize_model(ref_model, DENSE, cal, None, ref_gptq, format="gptq")
    executor = executor or LocalShardExecutor(workers)
    run = quantize_model(
        shard_model, DENSE, cal, None, shard_gptq, format="gptq", options=LoopOptions(executor=executor)
    )
    assert_same_run(ref, run, ref_model, shard_model)
    assert ref_gptq.states.keys() == shard_gptq.states.keys() and len(ref_gptq.states) == layers * INPUTS_PER_LAYER
    for key, state in ref_gptq.states.items():  # the float64 sums themselves, and the segment position
        theirs = shard_gptq.states[key]
        assert state["segments"] == segments and state.keys() == theirs.keys(), key
        for field in state:
            assert same_bits(*(torch.as_tensor(s[field]) for s in (state, theirs))), (key, field)
    return executor


@pytest.mark.parametrize(
    ("workers", "chunks", "straddled"),
    [
        (1, 2, 0),  # segments of 16 rows: 6 per input, 3 / 2 on each of 2 / 3 workers, none straddling
        (2, 2, 0),
        (3, 2, 0),
        (3, 3, 2),  # segments of 24 rows on shards of 32: [24, 48) and [48, 72) straddle, formed by workers 0 and 1
    ],
)
def test_chained_segment_sums_give_the_in_process_bits(
    workers: int, chunks: int, straddled: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    segment = segments_of(monkeypatch, rows=8, chunks=chunks)
    executor = run_both(workers, segments=96 // segment)
    assert executor.sum_reduce == "chain"
    for t in executor.times:
        assert t.chained == INPUTS_PER_LAYER and t.driver_rows == 0, t
        assert t.straddled == straddled * INPUTS_PER_LAYER, t
        # one sum per input back to the driver; each passed on once between consecutive workers
        assert t.bytes_sums == SUM_BYTES and t.bytes_chain == (workers - 1) * SUM_BYTES, t


def test_the_driver_reduce_is_still_there_and_gives_the_same_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    segments_of(monkeypatch, rows=8, chunks=2)
    executor = run_both(3, LocalShardExecutor(3, sum_reduce="driver"))
    for t in executor.times:
        assert t.chained == 0 and t.bytes_chain == 0 and t.bytes_sums == 6 * SUM_BYTES, t


class LosesAChainWorker(LocalShardExecutor):
    """Replaces worker ``index`` just before its first chain step (the workers before it have added their
    segments), as a Ray replacement would start: it holds no segment sums."""

    def __init__(self, workers: int, index: int) -> None:
        super().__init__(workers)
        self.index, self.replaced = index, 0

    def _chain_step(self, index, args):
        if index == self.index and not self.replaced:
            self.replaced += 1
            self.replace_worker(index)
        return super()._chain_step(index, args)


def test_a_worker_lost_in_the_middle_of_a_chain_makes_the_driver_capture_again_with_the_same_bits(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    segments_of(monkeypatch, rows=8, chunks=2)
    executor = LosesAChainWorker(3, index=1)
    with caplog.at_level(logging.INFO, logger="qlooper.executor"):
        run_both(3, executor)
    assert executor.replaced == 1
    assert [r.message for r in caplog.records if "holding segment sums was replaced; capturing again" in r.message]
    assert [r.message for r in caplog.records if "expected 2 held segment sums" in r.message]


@pytest.mark.parametrize("width", [4, 2048])
def test_the_chain_adds_in_segment_order(width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Values whose float64 sum depends on the order: ((1e16 + 1) + 1) - 1e16 is 0, 1e16 + (1 + 1) - 1e16 is 2.
    Worker 0 holds segment 0, worker 1 segments 1 and 2 (2: the straddling one it owns), worker 2 segment 3;
    the chain's total equals the accumulator's adding them one by one in that order. Width 2048: three Gram
    blocks, each its own part (parts of at least 1 byte), pipelined."""
    monkeypatch.setattr(executor_module, "CHAIN_PART_BYTES", 1)
    blocks = len(LowerGram(width).block_list())
    assert chain_parts(width) == [(b,) for b in range(blocks)] and blocks == (1 if width == 4 else 3)
    segment = segment_tokens(width)
    values = [1e16, 1.0, 1.0, -1e16]
    grams = [LowerGram.from_full(torch.full((width, width), v, dtype=torch.float64)) for v in values]
    reference = GPTQ(width, GPTQ_SPEC)
    for gram in grams:
        reference.add_segment(LowerGram.from_full(gram.full()), segment)
    expected = reference.chain_start()
    assert expected is not None
    presummed = grams[1].full() + grams[2].full()  # worker 1 adding its own two first: another order
    assert not same_bits(expected.full(), grams[0].full() + presummed + grams[3].full())

    executor = LocalShardExecutor(3)
    executor.times.append(LayerTimes(0))
    for worker, held in zip(executor._workers, ([grams[0]], [grams[1], grams[2]], [grams[3]]), strict=True):
        worker.sums = {"m": list(held)}
    module = nn.Linear(width, width)
    module.register_forward_hook(HessianRowsHook(None, GPTQ(width, GPTQ_SPEC)))  # type: ignore[arg-type]
    empty = torch.zeros(0, width)
    rows = [{"m": ShardRows([], empty, [], empty, 0.0, None, kept, held)} for kept, held in ((0, 1), (8, 1), (0, 1))]
    plans = [{"m": RowPlan(width, hold=True)}] * 3
    totals = executor._chain({"m": module}, plans, {"m": [Straddle(1, (2,))]}, rows, "layer 0")
    assert totals is not None
    total, segments = totals["m"]
    assert segments == 4 and same_bits(total.full(), expected.full())
    assert torch.equal(total.full(), torch.zeros(width, width, dtype=torch.float64))
    assert all(w.sums == {} for w in executor._workers)  # freed after the last block
    assert executor.times[0].bytes_chain == 2 * total.nbytes  # passed on twice: worker 0 -> 1 -> 2
    with pytest.raises(SegmentsLost, match="expected 1 held segment sums of 'm', found none"):
        executor._workers[0].chain("m", (0,), 1, None)


def test_chain_parts_cut_a_wide_sum_into_consecutive_parts_of_the_given_size() -> None:
    assert chain_parts(64) == [(0,)]  # one block under 2048 inputs
    # 8 x 8 blocks a side of 1024: 36 blocks of 8 MiB in the lower triangle, parts of 64 MiB = 8 blocks
    assert chain_parts(8192) == [tuple(range(k, min(k + 8, 36))) for k in range(0, 36, 8)]
    assert chain_parts(8192, part_bytes=3 * 8 * 1024 * 1024) == [(k, k + 1, k + 2) for k in range(0, 36, 3)]
