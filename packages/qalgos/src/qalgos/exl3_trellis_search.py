"""Viterbi search for EXL3 trellis symbols: the ``b``-bit symbol sequence of each tile whose decoded states
best match (least squares) a target sequence, with the tail-biting wrap of the EXL3 format.

Trellis (``L`` = ``state_bits``, 16 in EXL3; ``b`` = ``bits``): the state of position ``i`` is
``s_i = ((s_{i-1} << b) | sym_i) & (2^L - 1)`` and decodes to ``values[s_i]``; ``sym_i = s_i & (2^b - 1)``.
So the ``2^b`` predecessors of a state are the states that share its top ``L - b`` bits as their low bits
and differ in their own top ``b`` bits: with the cost vector laid out as ``[2^b, 2^(L-b)]`` (top bits
first) one step is a min over the first axis, a broadcast add of the new distortion, and a reshape.

**Tail-biting.** In EXL3 the states wrap around the tile's ``n = 256`` symbols: ``s_0`` is built from the
last symbols too, so a valid state sequence is a *cycle* (``s_0``'s top ``L - b`` bits, the *overlap*, equal
``s_{n-1}``'s low ``L - b`` bits). The exact optimum over cycles needs one constrained Viterbi per overlap
value (``2^(L-b)`` of them: 16384 at 2 bits); :func:`search_tiles` instead runs two passes:

1. an unconstrained Viterbi over the sequence rotated by ``n/2`` (the wrap point sits mid-path, where the
   path is not pulled by a free end); its cost is a **lower bound** on the tail-biting optimum (it relaxes
   one constraint), and its state at original position ``n-1`` gives the overlap ``c``;
2. a Viterbi over the sequence in order with ``s_0``'s top bits and ``s_{n-1}``'s low bits both fixed to
   ``c``: the best cycle through that overlap, a feasible (**upper bound**) solution.

The result is exact whenever the two costs agree, and the gap is reported per tile (``TrellisResult.bound``);
the constrained pass is exact given its overlap (tested against brute force on small trellises).

Memory: two float32 cost vectors ``[T, 2^L]`` and the per-step minima over predecessors, float32
``[n, T, 2^(L-b)]`` (16 MiB per tile at 2 bits, 4 MiB at 4 bits); the backtrack recomputes each step's choice
among the ``2^b`` predecessors from them with the forward's float32 operations.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import ShapeError, SpecError

#: EXL3's state width.
STATE_BITS = 16
#: float32 elements of the per-step minima buffer :func:`search_tiles` keeps (256 MiB): it sets the tiles per
#: Viterbi batch (16 at 2 bits, 64 at 4 bits).
WORKSPACE_ELEMENTS = 1 << 26


@dataclass(frozen=True)
class TrellisResult:
    """Symbols of ``T`` tiles and their costs.

    * ``symbols``: int64 ``[T, n]``, each in ``0 .. 2^b - 1`` (decode order).
    * ``states``: int64 ``[T, n]``, the decoded (tail-biting) state of every position.
    * ``cost``: float64 ``[T]``, ``sum((values[states] - targets)**2)`` of the returned cycle.
    * ``bound``: float64 ``[T]``, the unconstrained (pass 1) optimum: a lower bound on the best cycle's cost.
    """

    symbols: torch.Tensor
    states: torch.Tensor
    cost: torch.Tensor
    bound: torch.Tensor


def check_search(targets: torch.Tensor, values: torch.Tensor, bits: int, state_bits: int) -> None:
    """Raise :class:`SpecError` / :class:`ShapeError` naming the field unless the search is well posed."""
    if not isinstance(bits, int) or not 1 <= bits <= 8:
        raise SpecError(f"bits: expected an integer in 1..8, found {bits!r}")
    if not isinstance(state_bits, int) or not 2 * bits <= state_bits <= STATE_BITS:
        raise SpecError(f"state_bits: expected an integer in {2 * bits}..{STATE_BITS}, found {state_bits!r}")
    if targets.ndim != 2 or targets.shape[1] < 2:
        raise ShapeError(f"targets: expected [tiles, positions >= 2], found {tuple(targets.shape)}")
    if values.shape != (1 << state_bits,):
        raise ShapeError(f"values: expected [{1 << state_bits}] (one per state), found {tuple(values.shape)}")
    if not bool(torch.isfinite(targets).all()):
        raise ShapeError("targets: contains NaN or infinity")


def viterbi(
    targets: torch.Tensor,
    values: torch.Tensor,
    bits: int,
    overlap: torch.Tensor | None = None,
    state_bits: int = STATE_BITS,
    workspace: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One Viterbi pass over ``targets`` float32 ``[T, n]`` with state values ``values`` float32 ``[2^L]``.

    ``overlap`` None: the best free path (any start, any end). ``overlap`` int64 ``[T]``: the best path
    with ``s_0 >> b == overlap`` and ``s_{n-1} & (2^(L-b) - 1) == overlap`` (a cycle through that overlap).
    Returns (``states`` int64 ``[T, n]``, ``cost`` float64 ``[T]``; the cost is recomputed from the states
    in float64, so it does not carry the float32 accumulation of the search). ``workspace``: a float32
    tensor of at least ``n · T · 2^(L-b)`` elements to hold the per-step minima (reused across calls, it
    saves the page faults of a fresh buffer: ~40% of the time at 2 bits here); None allocates one.

    Layout: the cost of state ``s = (low << b) | sym`` sits at ``[sym, low]`` (``[T, 2^b, 2^(L-b)]``), so the
    new distortion is added along the contiguous ``low`` axis; a predecessor's ``low`` splits into its top
    ``b`` bits (the choice) and ``mid``, and the new state's ``low`` is ``(mid << b) | sym_p``.
    """
    check_search(targets, values, bits, state_bits)
    tiles, n = targets.shape
    fan = 1 << bits
    shared = 1 << (state_bits - bits)  # the bits a state shares with its predecessors
    mid = 1 << (state_bits - 2 * bits)
    x = targets.to(torch.float32)
    v = values.to(torch.float32)
    table = v.view(shared, fan).T.contiguous()  # [sym, low]
    rows = torch.arange(tiles)
    # bests[i][:, low]: the least cost of a path to position i-1 ending in a predecessor of the states with
    # that ``low``; the backtrack recomputes which predecessor (the same float32 operations), so no choice
    # index is formed in the loop (a strided argmin costs more than the step's arithmetic here)
    size = n * tiles * shared
    if workspace is not None and workspace.dtype == torch.float32 and workspace.numel() >= size:
        bests = workspace.view(-1)[:size].view(n, tiles, shared)
    else:
        bests = torch.empty(n, tiles, shared, dtype=torch.float32)
    start = torch.zeros(tiles, shared, dtype=torch.float32)  # the additive constraint on s_0 >> b
    if overlap is not None:
        start.fill_(float("inf"))
        start[rows, overlap] = 0.0
    cost = (table[None] - x[:, :1, None]).square_().add_(start[:, None, :])  # [T, fan, shared]
    spare = torch.empty_like(cost)  # preallocated: a fresh [T, 2^L] per step costs page faults
    for i in range(1, n):
        best = cost.view(tiles, fan, fan, mid).amin(dim=2)  # [T, sym_p, mid_p]: over the top bits
        bests[i].view(tiles, mid, fan).copy_(best.transpose(1, 2))  # indexed by the new low (mid << b | sym)
        torch.sub(table[None], x[:, i, None, None], out=spare)
        spare.square_().add_(bests[i].view(tiles, 1, shared))
        cost, spare = spare, cost
    if overlap is None:
        flat = cost.view(tiles, -1).argmin(dim=1)
        last = ((flat % shared) << bits) | (flat // shared)
    else:
        ends = cost.view(tiles, fan, fan, mid)[rows, overlap & (fan - 1), :, overlap >> bits]  # [T, top]
        last = (ends.argmin(dim=1) << (state_bits - bits)) | overlap
    found = torch.empty(tiles, n, dtype=torch.int64)
    found[:, -1] = last
    tops = torch.arange(fan, dtype=torch.int64)
    for i in range(n - 1, 0, -1):
        low = found[:, i] >> bits
        preds = (tops[None, :] << (state_bits - bits)) | low[:, None]  # [T, fan]
        prior = start if i == 1 else bests[i - 1]
        pred_cost = (v[preds] - x[:, i - 1, None]).square_().add_(prior.gather(1, preds >> bits))
        found[:, i - 1] = preds[rows, pred_cost.argmin(dim=1)]
    exact = (values.to(torch.float64)[found] - targets.to(torch.float64)).square().sum(dim=1)
    return found, exact


def search_tiles(
    targets: torch.Tensor, values: torch.Tensor, bits: int, state_bits: int = STATE_BITS, window: int | None = None
) -> TrellisResult:
    """Tail-biting symbols for ``targets`` float32 ``[T, n]`` (decode order), two passes as in the module
    docstring, as many tiles at a time as :data:`WORKSPACE_ELEMENTS` holds. ``values``: float32 ``[2^L]``
    (``codebook_values``).

    ``window`` (the reduced search): pass 1 runs over only the ``window`` positions on each side of the wrap
    point instead of the whole rotated tile (``window=32``: 1.25 passes' work instead of 2). The overlap it
    picks is then the free optimum's over that stretch, and ``bound`` the least cost of those ``2 · window``
    positions alone (still a lower bound on the tile's best cycle, a weaker one). None: the whole tile."""
    check_search(targets, values, bits, state_bits)
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise SpecError(f"window: expected None or a positive number of positions, found {window!r}")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # hundreds of short steps per tile batch: threads' barriers cost more than they save
    try:
        return _search(targets, values, bits, state_bits, window)
    finally:
        torch.set_num_threads(threads)


def _search(
    targets: torch.Tensor, values: torch.Tensor, bits: int, state_bits: int, window: int | None
) -> TrellisResult:
    """:func:`search_tiles` after its checks, on the calling thread."""
    n = targets.shape[1]
    half = n // 2
    side = half if window is None else min(window, half)
    low_mask = (1 << (state_bits - bits)) - 1
    parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    batch_tiles = max(1, min(targets.shape[0], WORKSPACE_ELEMENTS // (n << (state_bits - bits))))
    workspace = torch.empty(batch_tiles * (n << (state_bits - bits)), dtype=torch.float32)
    for t0 in range(0, targets.shape[0], batch_tiles):
        batch = targets[t0 : t0 + batch_tiles]
        rolled = torch.roll(batch, -half, dims=1)  # rolled[:, j] = batch[:, (j + half) % n]: the wrap mid-way
        stretch = rolled[:, half - side : half + side]
        free_states, bound = viterbi(stretch, values, bits, None, state_bits, workspace)
        overlap = free_states[:, side - 1] & low_mask  # the free path's state at position n-1
        found, cost = viterbi(batch, values, bits, overlap, state_bits, workspace)
        parts.append((found, cost, bound))
    found = torch.cat([p[0] for p in parts])
    return TrellisResult(
        symbols=found & ((1 << bits) - 1),
        states=found,
        cost=torch.cat([p[1] for p in parts]),
        bound=torch.cat([p[2] for p in parts]),
    )
