"""Hessian accumulation and the damped inverse factor."""

from __future__ import annotations

import copy
import os

import pytest
import torch
from qalgos.hessian import GRAM_MIN_BLOCK, HessianAccumulator, add_gram, buffer_tokens
from qalgos.hessian_inverse import cholesky_with_inverse, damp_candidates, damped_inverse


@pytest.mark.parametrize("n", [40, 600, 1030])
def test_blocked_gram_matches_full_product_and_is_symmetric(n: int) -> None:
    x = torch.randn(300, n, generator=torch.Generator().manual_seed(n))
    acc = torch.zeros(n, n, dtype=torch.float64)
    add_gram(acc, x)
    assert torch.equal(acc, acc.T)
    torch.testing.assert_close(acc, x.double().T @ x.double(), rtol=1e-5, atol=1e-3)


def test_hessian_is_two_over_n_sum() -> None:
    acc = HessianAccumulator(3)
    acc.add_batch(torch.tensor([[1.0, 2.0, 0.0], [0.0, 1.0, 1.0]]))
    expected = torch.tensor([[1.0, 2.0, 0.0], [2.0, 5.0, 1.0], [0.0, 1.0, 1.0]])
    assert torch.equal(acc.hessian(), expected)  # 2/2 * sum x xᵀ


@pytest.mark.parametrize(("n", "leaf"), [(50, 1024), (300, 128), (700, 128), (700, 256), (1030, 1024)])
def test_blocked_cholesky_and_inverse(n: int, leaf: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from qalgos import hessian_inverse

    monkeypatch.setattr(hessian_inverse, "LEAF", leaf)  # several blocks, a partial last one
    x = torch.randn(n + 20, n, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    a = (x.T @ x / n).float()
    factors = cholesky_with_inverse(a)
    assert factors is not None
    lower, inverse = factors
    assert torch.equal(lower, lower.tril()) and torch.equal(inverse, inverse.tril())
    torch.testing.assert_close((lower @ lower.T).double(), a.double(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(
        (inverse.double() @ lower.double()), torch.eye(n, dtype=torch.float64), atol=1e-3, rtol=0
    )
    not_pd = a.clone()
    not_pd[n - 1, n - 1] = -1.0
    assert cholesky_with_inverse(not_pd) is None


def test_damped_factor_matches_the_textbook_chain() -> None:
    x = torch.randn(400, 300, generator=torch.Generator().manual_seed(2))
    h = (x.T @ x) * (2 / 400)
    result = damped_inverse(h, 0.05, 0.01)
    damped = h.double()
    damped.diagonal().add_(0.05 * float(h.diagonal().mean()))
    chain = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(damped)), upper=True)
    assert result.damp == 0.05 and result.attempts == 1 and result.floor == 0.0
    torch.testing.assert_close(result.upper.double(), chain, rtol=1e-4, atol=1e-5)


def test_damp_grid_and_bisection_equal_a_linear_walk() -> None:
    assert damp_candidates(0.05, 0.0) == [0.05]
    grid = damp_candidates(0.0, 0.25)
    assert grid == [0.0, 0.25, 0.5, 0.75]
    # An indefinite H (eigenvalues -1 and 3, mean diagonal 1) needs damp > 1/1: none of the grid works,
    # a diagonal floor is too small, so the factor is refused.
    h = torch.tensor([[1.0, 2.0], [2.0, 1.0]])
    refused = damped_inverse(h, 0.0, 0.25)
    assert refused.upper is None and refused.damp is None
    # Eigenvalues -0.2 and 2.2 (mean diagonal 1): the first working damp of 0.05 steps is 0.25.
    h = torch.tensor([[1.0, 1.2], [1.2, 1.0]])
    found = damped_inverse(h, 0.0, 0.05)
    walk = next(d for d in damp_candidates(0.0, 0.05) if torch.linalg.eigvalsh(h + d * torch.eye(2)).min() > 0)
    assert found.damp == pytest.approx(walk) and found.damp == pytest.approx(0.25)
    assert found.attempts < len(damp_candidates(0.0, 0.05))


def test_buffered_batches_equal_one_big_batch_and_resume_mid_buffer() -> None:
    from qalgos.hessian import buffer_tokens

    n = 48
    capacity = buffer_tokens(n)
    x = torch.randn(capacity * 2 + 37, n, generator=torch.Generator().manual_seed(5))
    whole = HessianAccumulator(n)
    whole.add_batch(x)
    pieces = HessianAccumulator(n)
    for start in range(0, x.shape[0], 100):  # batch edges never line up with the buffer's
        pieces.add_batch(x[start : start + 100])
    assert torch.equal(pieces.hessian(), whole.hessian())
    exact = 2 * x.double().T @ x.double() / x.shape[0]
    torch.testing.assert_close(whole.hessian().double(), exact, rtol=1e-5, atol=1e-5)
    first = HessianAccumulator(n)
    first.add_batch(x[: capacity + 5])  # 5 tokens left in the buffer
    state = first.state_dict()
    assert tuple(state["pending"].shape) == (5, n)
    resumed = HessianAccumulator(n)
    resumed.load_state_dict(state)
    resumed.add_batch(x[capacity + 5 :])
    assert torch.equal(resumed.hessian(), whole.hessian())


def test_an_input_that_sees_few_tokens_holds_few_rows_and_no_sum_until_a_chunk() -> None:
    """An MoE expert's accumulator: its buffer grows with what arrives (never past one chunk), its float64 sum is
    made at the first chunk, and neither changes a value."""
    from qalgos.hessian import MIN_BUFFER_TOKENS

    n = 64
    capacity = buffer_tokens(n)
    x = torch.randn(capacity + 3 * MIN_BUFFER_TOKENS, n, generator=torch.Generator().manual_seed(8))
    acc = HessianAccumulator(n)
    acc.add_batch(x[:10])
    assert acc.gram is None and acc._buffer is not None and acc._buffer.shape[0] == MIN_BUFFER_TOKENS
    acc.add_batch(x[10 : MIN_BUFFER_TOKENS + 20])  # grows: the 10 rows already buffered are kept
    assert acc.gram is None and acc._buffer.shape[0] == 2 * MIN_BUFFER_TOKENS
    assert torch.equal(acc.state_dict()["pending"], x[: MIN_BUFFER_TOKENS + 20])
    acc.add_batch(x[MIN_BUFFER_TOKENS + 20 :])  # past one chunk: a sum is made, the buffer stops at a chunk
    assert acc.gram is not None and acc._buffer.shape[0] == capacity
    whole = HessianAccumulator(n)
    whole.add_batch(x)
    assert torch.equal(acc.hessian(), whole.hessian())
    fresh = HessianAccumulator(n)  # a state of an accumulator that saw nothing still loads
    fresh.load_state_dict(HessianAccumulator(n).state_dict())
    fresh.add_batch(x)
    assert torch.equal(fresh.hessian(), whole.hessian())


def test_released_statistics_refuse_further_use() -> None:
    from qalgos.errors import StateError

    acc = HessianAccumulator(8)
    acc.add_batch(torch.randn(10, 8))
    h = acc.hessian()
    acc.release()
    assert acc.gram is None and h.shape == (8, 8)
    for call in (acc.hessian, lambda: acc.add_batch(torch.randn(2, 8)), acc.state_dict):
        with pytest.raises(StateError, match="released"):
            call()
    with pytest.raises(StateError, match="pending"):
        HessianAccumulator(8).load_state_dict(
            {"hessian_sum": torch.zeros(8, 8), "nsamples": 1, "in_features": 8, "pending": torch.zeros(3, 9)}
        )


@pytest.mark.parametrize("n", [1, 2, 3, 64, 513])
@pytest.mark.parametrize("chunk", [1, 7, 1 << 18])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])  # numpy's path; torch's
def test_reverse_in_place_equals_flip_of_both_axes(
    n: int, chunk: int, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    import qalgos.hessian_inverse as hinv

    monkeypatch.setattr(hinv, "REVERSE_CHUNK", chunk)
    matrix = torch.randn(n, n, generator=torch.Generator().manual_seed(n)).to(dtype)
    want = matrix.flip(0, 1).clone()
    hinv.reverse_in_place(matrix)
    assert torch.equal(matrix, want)


@pytest.mark.parametrize("n", [3, 600, 2100])
def test_lower_blocks_equal_a_full_sum_exactly(n: int) -> None:
    """Keeping only the lower-triangle blocks gives, bit for bit, the Hessian a full [in, in] sum gives."""
    gen = torch.Generator().manual_seed(n)
    chunks = [torch.randn(tokens, n, generator=gen) for tokens in (300, 17, 4096, 5)]
    full = torch.zeros(n, n, dtype=torch.float64)
    acc = HessianAccumulator(n)
    for x in chunks:
        acc.add_batch(x)
    for start in range(0, sum(len(c) for c in chunks), buffer_tokens(n)):  # the accumulator's flush chunks
        add_gram(full, torch.cat(chunks)[start : start + buffer_tokens(n)])
    expected = (full * (2.0 / acc.nsamples)).to(torch.float32)
    assert torch.equal(acc.hessian(), expected)
    assert torch.equal(acc.state_dict()["hessian_sum"], full)
    assert acc.gram is not None
    if n >= 2 * GRAM_MIN_BLOCK:  # narrower inputs are one block
        assert sum(b.numel() for b in acc.gram.blocks.values()) < n * n  # only the lower triangle is kept


# The device parameter: "cpu" always; "cuda" only in the gpu nox session (LOWBIT_REQUIRE_CUDA=1), where a
# machine without CUDA fails instead of skipping.
DEVICES = ["cpu", *(["cuda"] if os.environ.get("LOWBIT_REQUIRE_CUDA") == "1" else [])]


@pytest.mark.parametrize("device", DEVICES)
def test_statistics_accumulate_on_the_activations_device_and_come_back_to_the_cpu(device: str) -> None:
    g = torch.Generator().manual_seed(5)
    batches = [torch.randn(3, 700, 300, generator=g) for _ in range(3)]  # 2100 tokens: flushes and a remainder
    cpu, there = HessianAccumulator(300), HessianAccumulator(300)
    for x in batches:
        cpu.add_batch(x)
        there.add_batch(x.to(device))
    assert there.gram is not None and there.gram.device.type == device
    state = there.state_dict()
    assert state["hessian_sum"].device.type == "cpu" and state["pending"].device.type == "cpu"
    hessian = there.hessian()
    assert hessian.device.type == "cpu" and hessian.dtype == torch.float32
    if device == "cpu":
        assert torch.equal(hessian, cpu.hessian())
    else:  # another GEMM: float32 rounding apart
        assert torch.allclose(hessian, cpu.hessian(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_a_cpu_state_continues_on_the_activations_device_exactly(device: str) -> None:
    g = torch.Generator().manual_seed(6)
    first, second = torch.randn(1500, 260, generator=g), torch.randn(900, 260, generator=g)
    whole = HessianAccumulator(260)
    whole.add_batch(first.to(device))
    saved = whole.state_dict()
    whole.add_batch(second.to(device))
    resumed = HessianAccumulator(260)
    resumed.load_state_dict(saved)  # a CPU state (as a checkpoint holds it)
    resumed.add_batch(second.to(device))
    assert torch.equal(resumed.hessian(), whole.hessian())
    assert torch.equal(resumed.state_dict()["hessian_sum"], whole.state_dict()["hessian_sum"])


def test_bfloat16_activations_are_accumulated_in_float32() -> None:
    x = torch.randn(2, 64, 128, generator=torch.Generator().manual_seed(7)).to(torch.bfloat16)
    acc, ref = HessianAccumulator(128), HessianAccumulator(128)
    acc.add_batch(x)
    ref.add_batch(x.float())  # the same values, already float32
    assert torch.equal(acc.hessian(), ref.hessian())


@pytest.mark.parametrize("n", [576, 1536, 2100])
def test_the_block_width_never_changes_the_sum(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocked products equal the full float32 product bit for bit, so GRAM_MIN_BLOCK is a speed choice only.

    Widths from 256 (blocks of 256 to 2100 columns here): on an Intel Xeon with AMX, MKL's products into 72- and
    192-column blocks (width 128 at n = 576 and 1536) differ from the full product in the last bits; every block
    the package forms is at least GRAM_MIN_BLOCK (1024) columns wide."""
    from qalgos import hessian

    x = torch.randn(1024, n, generator=torch.Generator().manual_seed(n))
    full = (x.T @ x).to(torch.float64)
    for width in (256, 512, 1024):
        monkeypatch.setattr(hessian, "GRAM_MIN_BLOCK", width)
        gram = hessian.LowerGram(n)
        gram.add(x)
        assert torch.equal(gram.full(), full), width


@pytest.mark.parametrize(("n", "leaf"), [(50, 1024), (700, 128), (1030, 256)])
def test_consumed_hessian_gives_the_same_factor_bit_for_bit(n: int, leaf: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``consume=True`` factors the first damping in place: the factor equals the copying path's exactly."""
    from qalgos import hessian_inverse

    monkeypatch.setattr(hessian_inverse, "LEAF", leaf)
    x = torch.randn(n + 40, n, generator=torch.Generator().manual_seed(n))
    h = (x.T @ x) * (2 / (n + 40))
    h = (h + h.T) / 2  # exactly symmetric, as the accumulator's Hessian is
    copied = damped_inverse(h, 0.01, 0.01)
    given = h.clone()
    consumed = damped_inverse(given, 0.01, 0.01, consume=True)
    assert consumed.upper is not None and copied.upper is not None
    assert torch.equal(consumed.upper, copied.upper)
    assert (consumed.damp, consumed.attempts, consumed.floor) == (copied.damp, copied.attempts, copied.floor)


@pytest.mark.parametrize("leaf", [2, 1024])
def test_failed_in_place_factor_restores_the_hessian_bit_for_bit(leaf: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A first damping that fails leaves the consumed Hessian exactly as it was (-0.0 entries included), so
    the search goes on as on a copy and finds the same damp."""
    from qalgos import hessian_inverse

    monkeypatch.setattr(hessian_inverse, "LEAF", leaf)
    # eigenvalues -0.2 and 2.2 per 2x2 block (mean diagonal 1): damp 0 fails, 0.25 is the first that works
    block = torch.tensor([[1.0, 1.2], [1.2, 1.0]])
    h = torch.block_diag(block, block, block)
    h[0, 5] = h[5, 0] = -0.0
    before = h.clone()
    assert hessian_inverse._factor_in_place(h, 0.0) is None
    assert torch.equal(h, before) and torch.equal(torch.signbit(h), torch.signbit(before))
    copied = damped_inverse(before, 0.0, 0.05)
    consumed = damped_inverse(h, 0.0, 0.05, consume=True)
    assert consumed.damp == copied.damp == pytest.approx(0.25)
    assert consumed.attempts == copied.attempts and torch.equal(consumed.upper, copied.upper)


@pytest.mark.parametrize("n", [5, 2100, 4100])
def test_releasing_hessian_equals_the_kept_one_and_frees_the_sum(n: int) -> None:
    """``hessian(release=True)`` frees the float64 block rows while it writes: the same float32 Hessian, bit for
    bit, and the accumulator is released afterwards."""
    from qalgos.errors import StateError

    gen = torch.Generator().manual_seed(n)
    kept, released = HessianAccumulator(n), HessianAccumulator(n)
    for tokens in (300, 4096, 9):
        x = torch.randn(tokens, n, generator=gen)
        kept.add_batch(x)
        released.add_batch(x)
    gram = released.gram
    assert gram is not None
    assert torch.equal(released.hessian(release=True), kept.hessian())
    assert released.gram is None and not gram.blocks  # every block row was given up
    with pytest.raises(StateError, match="released"):
        released.hessian()


def _small_chunks(monkeypatch: pytest.MonkeyPatch, rows: int = 8, chunks: int = 3) -> None:
    """Chunks of ``rows`` rows and segments of ``chunks`` chunks (the real ones are 4096 x 8)."""
    from qalgos import hessian

    monkeypatch.setattr(hessian, "MIN_BUFFER_TOKENS", rows)
    monkeypatch.setattr(hessian, "MAX_BUFFER_TOKENS", rows)
    monkeypatch.setattr(hessian, "SEGMENT_CHUNKS", chunks)


def _closed_total(acc: HessianAccumulator) -> torch.Tensor:
    acc.hessian()  # flushes and closes the open segment
    return acc.state_dict()["hessian_sum"]


def test_chunks_add_into_segments_and_segments_into_the_total(monkeypatch: pytest.MonkeyPatch) -> None:
    _small_chunks(monkeypatch)
    x = torch.randn(8 * 3 * 3 + 10, 16, generator=torch.Generator().manual_seed(11))
    acc = HessianAccumulator(16)
    acc.add_batch(x)
    total = torch.zeros(16, 16, dtype=torch.float64)
    for first in range(0, x.shape[0], 24):  # segments of 3 chunks of 8 rows, the last one partial
        segment = torch.zeros(16, 16, dtype=torch.float64)
        for chunk in x[first : first + 24].split(8):
            segment += (chunk.T @ chunk).double()
        total += segment
    assert torch.equal(_closed_total(acc), total)
    one_level = HessianAccumulator(16)  # up to one segment the total is 0 + segment: the old one-level sum
    one_level.add_batch(x[:24])
    flat = torch.zeros(16, 16, dtype=torch.float64)
    for chunk in x[:24].split(8):
        flat += (chunk.T @ chunk).double()
    assert torch.equal(_closed_total(one_level), flat)


@pytest.mark.parametrize("head", [0, 5, 24])
def test_segments_formed_elsewhere_add_to_the_same_bits(head: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from qalgos.hessian import segment_sum

    _small_chunks(monkeypatch)
    x = torch.randn(24 * 4 + 13, 16, generator=torch.Generator().manual_seed(head))
    whole = HessianAccumulator(16)
    for start in range(0, x.shape[0], 7):
        whole.add_batch(x[start : start + 7])
    pieces = HessianAccumulator(16)
    pieces.add_batch(x[:head])  # rows up to the first boundary (none at 0 and 24)
    boundary = head + pieces.rows_to_boundary()
    pieces.add_batch(x[head:boundary])
    assert pieces.rows_to_boundary() == 0 and boundary == (0 if head == 0 else 24)
    for first in (boundary, boundary + 24):
        pieces.add_segment(segment_sum(x[first : first + 24]), 24)
    pieces.add_batch(x[boundary + 48 :])
    assert pieces.nsamples == whole.nsamples and pieces.rows_to_boundary() == whole.rows_to_boundary() != 0
    assert torch.equal(pieces.hessian(), whole.hessian())
    assert torch.equal(pieces.state_dict()["hessian_sum"], whole.state_dict()["hessian_sum"])


def test_segments_at_the_real_constants_add_to_the_same_bits() -> None:
    from qalgos.hessian import segment_sum, segment_tokens

    whole_rows = segment_tokens(64)
    assert whole_rows == 8 * 4096
    x = torch.randn(1000 + 2 * whole_rows + 777, 64, generator=torch.Generator().manual_seed(3))
    whole, pieces = HessianAccumulator(64), HessianAccumulator(64)
    whole.add_batch(x)
    pieces.add_batch(x[:1000])
    head = 1000 + pieces.rows_to_boundary()
    pieces.add_batch(x[1000:head])
    pieces.add_segment(segment_sum(x[head : head + whole_rows]), whole_rows)
    pieces.add_batch(x[head + whole_rows :])
    assert torch.equal(pieces.hessian(), whole.hessian())


def test_add_segment_only_at_a_boundary_and_only_whole_segments(monkeypatch: pytest.MonkeyPatch) -> None:
    from qalgos.errors import ShapeError, StateError
    from qalgos.hessian import LowerGram, segment_sum

    _small_chunks(monkeypatch)
    segment = segment_sum(torch.randn(24, 16))
    buffered = HessianAccumulator(16)
    buffered.add_batch(torch.randn(3, 16))
    with pytest.raises(StateError, match=r"segment boundary .* found 3 buffered rows and 0 of 3 chunks"):
        buffered.add_segment(segment, 24)
    chunked = HessianAccumulator(16)
    chunked.add_batch(torch.randn(8, 16))  # one whole chunk in the open segment, nothing buffered
    assert chunked.rows_to_boundary() == 16
    with pytest.raises(StateError, match="found 0 buffered rows and 1 of 3 chunks"):
        chunked.add_segment(segment, 24)
    fresh = HessianAccumulator(16)
    with pytest.raises(ShapeError, match="tokens: expected one whole segment of 24 rows"):
        fresh.add_segment(segment, 23)
    with pytest.raises(ShapeError, match="total: expected a LowerGram of width 16, found width 8"):
        fresh.add_segment(LowerGram(8), 24)
    with pytest.raises(ShapeError, match="rows: expected one whole segment of 24 rows"):
        segment_sum(torch.randn(20, 16))
    with pytest.raises(ShapeError, match=r"blocks\[0, 0\]: expected float64 \(16, 16\), found torch.float32"):
        LowerGram.from_blocks(16, [torch.zeros(16, 16)])


def test_state_round_trip_inside_a_later_segment(monkeypatch: pytest.MonkeyPatch) -> None:
    _small_chunks(monkeypatch)
    x = torch.randn(24 + 8 + 5 + 40, 16, generator=torch.Generator().manual_seed(4))
    whole = HessianAccumulator(16)
    whole.add_batch(x)
    first = HessianAccumulator(16)
    first.add_batch(x[:37])  # one closed segment, one chunk in the open one, 5 rows buffered
    state = first.state_dict()
    assert (state["segments"], state["segment_chunks"], tuple(state["pending"].shape)) == (1, 1, (5, 16))
    assert tuple(state["segment_sum"].shape) == (16, 16)
    resumed = HessianAccumulator(16)
    resumed.load_state_dict(state)
    resumed.add_batch(x[37:])
    assert torch.equal(resumed.hessian(), whole.hessian())


def test_a_state_without_segment_fields_loads_only_within_one_segment(monkeypatch: pytest.MonkeyPatch) -> None:
    from qalgos.errors import StateError

    _small_chunks(monkeypatch)
    x = torch.randn(70, 16, generator=torch.Generator().manual_seed(9))
    whole = HessianAccumulator(16)
    whole.add_batch(x)
    for cut in (5, 16 + 5, 24):
        older = HessianAccumulator(16)
        older.add_batch(x[:cut])
        state = {k: v for k, v in older.state_dict().items() if k not in ("segments", "segment_chunks")}
        resumed = HessianAccumulator(16)
        resumed.load_state_dict(state)  # the sum is the open segment's (or, at 24 rows, the closed one's)
        resumed.add_batch(x[cut:])
        assert torch.equal(resumed.hessian(), whole.hessian()), cut
    beyond = HessianAccumulator(16)
    beyond.add_batch(x[:33])
    state = {k: v for k, v in beyond.state_dict().items() if k not in ("segments", "segment_chunks", "segment_sum")}
    with pytest.raises(StateError, match=r"without segment fields .* holds 32 tokens .* more than one segment"):
        HessianAccumulator(16).load_state_dict(state)


@pytest.mark.parametrize("closed_before", [0, 2])
def test_a_chained_total_gives_the_bits_of_adding_each_segment(
    closed_before: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The running total of a chain (start, then each segment's sum added in order elsewhere) is the accumulator's
    total bit for bit, whether it starts from zero (``None``) or from closed segments."""
    from qalgos.errors import ShapeError, StateError
    from qalgos.hessian import segment_sum

    _small_chunks(monkeypatch)
    x = torch.randn(24 * (closed_before + 3) + 5, 16, generator=torch.Generator().manual_seed(11))
    whole = HessianAccumulator(16)
    whole.add_batch(x)
    chained = HessianAccumulator(16)
    chained.add_batch(x[: 24 * closed_before])
    start = chained.chain_start()
    assert (start is None) == (closed_before == 0)
    running = None if start is None else copy.deepcopy(start)
    for k in range(closed_before, closed_before + 3):
        segment = segment_sum(x[24 * k : 24 * (k + 1)])
        if running is None:
            running = segment  # 0 + s is s exactly
        else:
            running.add_sum(segment)
    assert running is not None
    chained.add_chained(running, 3)
    chained.add_batch(x[24 * (closed_before + 3) :])
    assert chained.nsamples == whole.nsamples and chained.rows_to_boundary() == whole.rows_to_boundary()
    for key, value in whole.state_dict().items():
        assert torch.equal(torch.as_tensor(chained.state_dict()[key]), torch.as_tensor(value)), key
    with pytest.raises(StateError, match="chain_start: expected the accumulator at a segment boundary"):
        chained.chain_start()
    fresh = HessianAccumulator(16)
    with pytest.raises(ShapeError, match="segments: expected at least 1"):
        fresh.add_chained(segment_sum(x[:24]), 0)
