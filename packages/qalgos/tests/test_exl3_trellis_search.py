"""The EXL3 Viterbi search against brute force on small trellises, and local optimality on EXL3's own."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from qalgos.errors import ShapeError, SpecError
from qalgos.exl3_trellis_search import search_tiles, viterbi
from qformats.layouts.exl3.trellis import codebook_values, states


def circular_states(symbols: np.ndarray, bits: int, state_bits: int) -> np.ndarray:
    """int64 ``[..., n]``: the low ``state_bits`` bits of the wrapped window ending at each position."""
    out = np.zeros(symbols.shape, np.int64)
    for back in range(-(-state_bits // bits)):
        out |= np.roll(symbols.astype(np.int64), back, axis=-1) << (bits * back)
    return out & ((1 << state_bits) - 1)


def all_sequences(bits: int, n: int) -> np.ndarray:
    """int64 ``[2^(bits n), n]``: every symbol sequence."""
    return np.array(list(itertools.product(range(1 << bits), repeat=n)), np.int64)


def small_case(seed: int, state_bits: int, tiles: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(tiles, n, generator=gen), torch.randn(1 << state_bits, generator=gen)


@pytest.mark.parametrize(("bits", "state_bits", "n"), [(1, 4, 9), (2, 4, 6), (2, 5, 6), (3, 6, 4)])
def test_free_viterbi_equals_brute_force(bits: int, state_bits: int, n: int) -> None:
    """Unconstrained: any start state, then n-1 symbols; the minimum over every such path."""
    targets, values = small_case(bits * 10 + n, state_bits, 3, n)
    found, cost = viterbi(targets, values, bits, None, state_bits)
    mask = (1 << state_bits) - 1
    starts = np.arange(1 << state_bits)
    tails = all_sequences(bits, n - 1)
    paths = np.empty((starts.size, tails.shape[0], n), np.int64)
    paths[:, :, 0] = starts[:, None]
    for i in range(1, n):
        paths[:, :, i] = ((paths[:, :, i - 1] << bits) | tails[None, :, i - 1]) & mask
    paths = paths.reshape(-1, n)
    v, x = values.double().numpy(), targets.double().numpy()
    for t in range(targets.shape[0]):
        brute = ((v[paths] - x[t]) ** 2).sum(axis=1)
        assert float(cost[t]) == pytest.approx(brute.min(), rel=1e-12)
        assert float(((v[found[t].numpy()] - x[t]) ** 2).sum()) == pytest.approx(brute.min(), rel=1e-12)
        steps = found[t].numpy()
        assert ((steps[1:] >> bits) == (steps[:-1] & (mask >> bits))).all()  # a path of the trellis


@pytest.mark.parametrize(("bits", "state_bits", "n"), [(1, 4, 10), (2, 4, 7), (2, 6, 7), (3, 6, 5)])
def test_tail_biting_against_brute_force(bits: int, state_bits: int, n: int) -> None:
    """Every cycle enumerated: the constrained pass is the best cycle through its overlap, the minimum over
    overlaps is the exact optimum, and the two-pass search lies between its lower bound and that optimum."""
    targets, values = small_case(bits * 100 + n, state_bits, 4, n)
    seqs = all_sequences(bits, n)
    cyc = circular_states(seqs, bits, state_bits)
    low = (1 << (state_bits - bits)) - 1
    overlap_of = cyc[:, -1] & low
    assert ((cyc[:, 0] >> bits) == overlap_of).all()  # the reference windows are cycles
    v, x = values.double().numpy(), targets.double().numpy()
    result = search_tiles(targets, values, bits, state_bits)
    reduced = search_tiles(targets, values, bits, state_bits, window=2)
    for t in range(targets.shape[0]):
        brute = ((v[cyc] - x[t]) ** 2).sum(axis=1)
        per_overlap = []
        for c in range(low + 1):
            _, cost = viterbi(targets[t : t + 1], values, bits, torch.tensor([c]), state_bits)
            assert float(cost[0]) == pytest.approx(brute[overlap_of == c].min(), rel=1e-12)
            per_overlap.append(float(cost[0]))
        assert min(per_overlap) == pytest.approx(brute.min(), rel=1e-12)
        sym = result.symbols[t].numpy()
        assert np.array_equal(circular_states(sym, bits, state_bits), result.states[t].numpy())
        assert float(result.cost[t]) == pytest.approx(float(((v[result.states[t].numpy()] - x[t]) ** 2).sum()))
        assert float(result.bound[t]) <= brute.min() + 1e-9 <= float(result.cost[t]) + 2e-9
        for found in (result, reduced):  # the reduced search: a valid cycle, between its (weaker) bound and more
            states_t = found.states[t].numpy()
            assert np.array_equal(circular_states(found.symbols[t].numpy(), bits, state_bits), states_t)
            assert float(found.cost[t]) == pytest.approx(float(((v[states_t] - x[t]) ** 2).sum()))
            assert float(found.bound[t]) <= brute.min() + 1e-9 <= float(found.cost[t]) + 2e-9
            assert float(found.cost[t]) == pytest.approx(per_overlap[int(states_t[-1] & low)], rel=1e-12)


@pytest.mark.parametrize("bits", [2, 3, 4])
def test_exl3_search_is_locally_optimal(bits: int) -> None:
    """On EXL3's 16-bit trellis: the symbols decode (qformats' own states) to the returned states, and no
    single-symbol change that keeps the wrap overlap lowers the cost."""
    gen = torch.Generator().manual_seed(bits)
    values = torch.from_numpy(codebook_values("3inst"))
    targets = torch.randn(2, 256, generator=gen) * 1.1
    result = search_tiles(targets, values, bits)
    v = values.double().numpy()
    free = 256 - -(-(16 - bits) // bits)  # positions before the symbols that make up the overlap
    for t in range(2):
        sym = result.symbols[t].numpy().astype(np.uint8)
        decoded = states(sym, bits)
        assert np.array_equal(decoded, result.states[t].numpy())
        cost = float(((v[decoded] - targets[t].double().numpy()) ** 2).sum())
        assert float(result.cost[t]) == pytest.approx(cost, rel=1e-12)
        assert float(result.bound[t]) <= cost
        variants = np.repeat(sym[None, :], free * ((1 << bits) - 1), axis=0)
        rows = 0
        for i in range(free):
            for s in range(1 << bits):
                if s != sym[i]:
                    variants[rows, i] = s
                    rows += 1
        alt = ((v[states(variants, bits)] - targets[t].double().numpy()) ** 2).sum(axis=1)
        assert alt.min() >= cost - 1e-9


def test_search_refuses_bad_input() -> None:
    values = torch.zeros(1 << 16)
    with pytest.raises(SpecError, match="bits"):
        search_tiles(torch.zeros(1, 256), values, 9)
    with pytest.raises(ShapeError, match="values"):
        search_tiles(torch.zeros(1, 256), torch.zeros(10), 2)
    with pytest.raises(ShapeError, match="targets"):
        search_tiles(torch.full((1, 256), float("nan")), values, 2)
    with pytest.raises(SpecError, match="window"):
        search_tiles(torch.zeros(1, 256), values, 2, window=0)
