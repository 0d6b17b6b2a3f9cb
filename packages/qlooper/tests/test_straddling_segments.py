"""Hessian segments straddling shards are formed on the worker holding their first rows, with one process's bits."""

import logging

import pytest
import torch
from qlooper import LoopOptions, prepare_calibration, quantize_model
from qlooper.executor import LocalShardExecutor, same_bits
from qlooper.worker_statistics import Straddle, straddles
from test_executor import GPTQ_SPEC, StatisticsOfGPTQ, assert_same_run
from toy_models import DENSE, VOCAB, ToyDecoder

INPUTS_PER_LAYER = 4  # q/k/v, o, gate/up, down: one Hessian each


def test_straddles_lists_whole_segments_across_shards_with_their_owner_and_senders() -> None:
    # half a segment per shard: every segment straddles two shards
    assert straddles(0, 32, [16, 16, 16, 16]) == [Straddle(0, (1,)), Straddle(2, (3,))]
    # a segment across three shards; the last, partial segment (24 of 48 rows) is not listed
    assert straddles(0, 48, [16, 16, 16, 16, 16, 16, 16, 8]) == [Straddle(0, (1, 2)), Straddle(3, (4, 5))]
    # a shard ending on a boundary starts no straddle; segments inside one shard are not listed; empty shards skip
    assert straddles(0, 16, [32, 8, 0, 8, 16]) == [Straddle(1, (3,))]
    # rows already buffered before the capture: the first boundary lies 4 rows in (rows before it: the driver's)
    assert straddles(4, 16, [12, 12, 12]) == [Straddle(0, (1,)), Straddle(1, (2,))]
    assert straddles(0, 16, [8]) == [] and straddles(0, 16, []) == []


def fixed_calibration(batches: int, tokens: int):
    """``batches`` batches of one unpadded row of ``tokens`` tokens (every shard's rows known exactly)."""
    g = torch.Generator().manual_seed(7)
    rows = [torch.randint(1, VOCAB, (tokens,), generator=g).tolist() for _ in range(batches)]
    return prepare_calibration(rows, batch_size=1, max_length=tokens, min_length=2, sort=None)


def segments_of(monkeypatch: pytest.MonkeyPatch, rows: int, chunks: int) -> int:
    """Hessian chunks of ``rows`` rows and segments of ``chunks`` chunks (the real ones: 4096 x 8); the
    in-process workers see the same constants. Returns the segment's rows."""
    from qalgos import hessian

    monkeypatch.setattr(hessian, "MIN_BUFFER_TOKENS", rows)
    monkeypatch.setattr(hessian, "MAX_BUFFER_TOKENS", rows)
    monkeypatch.setattr(hessian, "SEGMENT_CHUNKS", chunks)
    return rows * chunks


class LosesAnOwner(LocalShardExecutor):
    """Replaces worker 0 (an owner) before the first straddle call, as a Ray replacement would start."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        self.replaced = 0

    def _call(self, method, per_worker, during, shared=None):
        if method == "straddle" and not self.replaced:
            self.replaced += 1
            self.replace_worker(0)
        return super()._call(method, per_worker, during, shared)


@pytest.mark.parametrize(
    ("workers", "batches", "chunks", "per_input"),
    [
        (4, 8, 4, 2),  # 4 shards of 16 rows, segments of 32: half a segment each
        (6, 12, 6, 2),  # 6 shards of 16 rows, segments of 48: each segment across three shards
    ],
)
def test_every_segment_straddling_gives_the_in_process_bits_and_no_driver_products(
    workers: int, batches: int, chunks: int, per_input: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    segment = segments_of(monkeypatch, rows=8, chunks=chunks)
    cal = fixed_calibration(batches, tokens=8)
    ref_model, shard_model = ToyDecoder(), ToyDecoder()
    ref_gptq, shard_gptq = StatisticsOfGPTQ(GPTQ_SPEC), StatisticsOfGPTQ(GPTQ_SPEC)
    ref = quantize_model(ref_model, DENSE, cal, None, ref_gptq, format="gptq")
    executor = LocalShardExecutor(workers)
    run = quantize_model(
        shard_model, DENSE, cal, None, shard_gptq, format="gptq", options=LoopOptions(executor=executor)
    )
    assert_same_run(ref, run, ref_model, shard_model)
    assert ref.report[0].tokens == per_input * segment  # whole segments only, none inside one shard
    assert ref_gptq.states.keys() == shard_gptq.states.keys() and len(ref_gptq.states) == 4 * INPUTS_PER_LAYER
    for key, state in ref_gptq.states.items():  # the float64 sums themselves
        theirs = shard_gptq.states[key]
        assert state["segments"] == per_input and state.keys() == theirs.keys(), key
        for field in state:
            assert same_bits(*(torch.as_tensor(s[field]) for s in (state, theirs))), (key, field)
    for t in executor.times:
        assert t.straddled == per_input * INPUTS_PER_LAYER, t
        assert t.driver_rows == 0 and t.bytes_straddle > 0 and t.bytes_sums > 0, t
    assert executor.describe()["layer_times"][0]["driver_rows"] == 0  # in the run report


def test_a_partial_last_segment_and_segments_inside_shards_keep_their_places(monkeypatch: pytest.MonkeyPatch) -> None:
    """3 shards of 20 rows, segments of 16: [0,16) inside shard 0, [16,32) and [32,48) straddle, the last 12
    rows are the open segment (the driver's rows)."""
    segments_of(monkeypatch, rows=8, chunks=2)
    cal = fixed_calibration(6, tokens=10)
    ref_model, shard_model = ToyDecoder(layers=2), ToyDecoder(layers=2)
    ref = quantize_model(ref_model, DENSE, cal, GPTQ_SPEC, "gptq")
    executor = LocalShardExecutor(3)
    run = quantize_model(shard_model, DENSE, cal, GPTQ_SPEC, "gptq", options=LoopOptions(executor=executor))
    assert_same_run(ref, run, ref_model, shard_model)
    for t in executor.times:
        assert t.straddled == 2 * INPUTS_PER_LAYER and t.driver_rows == 12 * INPUTS_PER_LAYER, t


def test_a_replaced_owner_makes_the_driver_capture_again_with_the_same_bits(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    segments_of(monkeypatch, rows=8, chunks=4)
    cal = fixed_calibration(8, tokens=8)
    ref_model, shard_model = ToyDecoder(layers=2), ToyDecoder(layers=2)
    ref = quantize_model(ref_model, DENSE, cal, GPTQ_SPEC, "gptq")
    executor = LosesAnOwner(4)
    with caplog.at_level(logging.WARNING, logger="qlooper.executor"):
        run = quantize_model(shard_model, DENSE, cal, GPTQ_SPEC, "gptq", options=LoopOptions(executor=executor))
    assert_same_run(ref, run, ref_model, shard_model)
    assert executor.replaced == 1
    assert [r.message for r in caplog.records if "capturing again" in r.message] != []
    assert all(t.driver_rows == 0 for t in executor.times)
