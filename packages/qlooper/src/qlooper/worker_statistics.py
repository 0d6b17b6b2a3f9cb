"""Statistics a sharded executor forms on its workers instead of sending a hooked module's inputs back.

A forward hook may declare what it needs of its module's input, so that a shard worker can keep the
activations and return much less:

* :class:`TokenCountHook` (the loop's per-module token count) needs only how many token rows each call
  carried: the worker returns the counts;
* :class:`HessianRowsHook` (GPTQ's statistics of a dense module's input) needs the token rows in order, to
  add to a :class:`qalgos.gptq.GPTQ` accumulator: the worker returns the rows from its first row to the first
  segment boundary of the accumulator's stream (``head``), the float64 sum of every whole segment inside its
  range (:func:`qalgos.hessian.segment_sum`, lower-triangle blocks), and the rows after the last one
  (``tail``). The driver feeds them worker by worker in order (head rows, segments, tail rows), so the
  accumulator sums the same chunks and segments in the same order as in one process: the same bits.

A whole segment that *straddles* shards (:func:`straddles`) is formed on the worker holding its first rows
(its ``owner``): the owner keeps its tail rows (``RowPlan.keep``), the workers after it return the head rows
that complete the segment, the driver passes those on to the owner (:meth:`LayerWorker.straddle
<qlooper.shard_worker.LayerWorker.straddle>`: through the driver, one hop each way) and the owner returns the
segment's float64 sum, which the driver adds in the segment's place. The driver itself adds token rows only
before the accumulator's first boundary (rows already buffered before the capture) and after the stream's
last whole segment (the open, partial segment; :func:`feed_rows` returns how many).

The executor plans a module this way only when every forward hook on it is one of these (at most one
:class:`HessianRowsHook`) and it has no pre-hook; otherwise the worker records its calls as before. The
segment boundaries need each worker's first row in the stream before the forward: the driver predicts the
rows of a batch as its token mask's count (the dense modules reading the layer's ``[B, T, in]`` tokens); a
worker whose module saw other counts (an input flattened to ``[B*T, in]`` with padding) says so, and the
executor captures that module's inputs raw instead (:class:`RowPlan` ``expected``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from qalgos.gptq import GPTQ
from qalgos.hessian import LowerGram, segment_sum, segment_tokens
from torch import nn

from .processors.base import LayerContext, first_tensor, matching_mask, tokens_in


class TokenCountHook:
    """The loop's forward hook counting a module's calibration tokens (``ctx.tokens[name]``; padding excluded
    when the input is ``[B, T, in]`` of the batch's mask). A worker can count for it (:meth:`add`)."""

    def __init__(self, ctx: LayerContext, name: str) -> None:
        self.ctx, self.name = ctx, name

    def __call__(self, _m: nn.Module, inputs: tuple[Any, ...], _out: Any) -> None:
        self.add(tokens_in(self.ctx.mask, first_tensor(inputs)))

    def add(self, tokens: int) -> None:
        """Count ``tokens`` more rows for this module."""
        self.ctx.tokens[self.name] = self.ctx.tokens.get(self.name, 0) + tokens


class HessianRowsHook:
    """GPTQ's forward hook on the first module reading a dense input: adds the input's token rows to ``task``
    (``ctx.mask_for`` drops padding), and lets a sharded executor form whole segments on its workers."""

    def __init__(self, ctx: LayerContext, task: GPTQ) -> None:
        self.ctx, self.task = ctx, task

    def __call__(self, _m: nn.Module, inputs: tuple[Any, ...], _out: Any) -> None:
        x = first_tensor(inputs)
        self.task.add_batch(x.detach(), self.ctx.mask_for(x))

    @property
    def in_features(self) -> int:
        return int(self.task.in_features)

    def segment_rows(self) -> int:
        """Rows of one whole segment (:func:`qalgos.hessian.segment_tokens`)."""
        return segment_tokens(self.in_features)

    def add_pieces(
        self, pieces: ShardRows, *, head_sent: bool = False, straddle: list[torch.Tensor] | None = None
    ) -> int:
        """One worker's head rows, whole segments and tail rows, in that order; returns the rows added as rows
        (whose chunk products this process forms). ``head_sent``: the head rows completed a straddling segment
        an earlier worker formed (already added); ``straddle``: the blocks of the straddling segment that
        starts with this worker's tail (kept on the worker), added in the tail's place."""
        rows = 0
        if not head_sent:
            rows += self.task.add_batch(pieces.head)
        for blocks in pieces.segments:
            self.task.add_segment(LowerGram.from_blocks(self.in_features, blocks), self.segment_rows())
        if straddle is not None:
            self.task.add_segment(LowerGram.from_blocks(self.in_features, straddle), self.segment_rows())
        elif pieces.kept:
            raise ValueError(f"{pieces.kept} tail rows were kept on a worker for a straddling segment, no sum came")
        else:
            rows += self.task.add_batch(pieces.tail)
        return rows

    def add_chained(self, pieces: Sequence[ShardRows], total: LowerGram, segments: int, sent: set[int]) -> int:
        """The chained reduce's result: ``total``, the accumulator's :meth:`~qalgos.gptq.GPTQ.chain_start` plus
        every whole segment of the stream added in segment order along the workers (``segments`` of them), then
        the rows after the last whole segment (the workers' head rows not in ``sent`` and their tails not kept),
        in worker order. The stream started at a segment boundary, so no row comes before the first segment.
        Returns the rows added as rows."""
        self.task.add_chained(total, segments)
        rows = 0
        for w, shard in enumerate(pieces):
            if shard.segments:
                raise ValueError(f"worker {w}: {len(shard.segments)} segment sums came back for a chained input")
            if w not in sent:
                rows += self.task.add_batch(shard.head)
            if not shard.kept:
                rows += self.task.add_batch(shard.tail)
        return rows


@dataclass(frozen=True)
class RowPlan:
    """What one worker does with one planned module's input in a capture call (driver to worker).

    ``in_features``: the input width (0 for a count); ``expected``: the predicted rows of each of the worker's
    batches (None: only count); ``head``: rows, from the worker's first, that go back as rows before the first
    segment boundary; ``segment``: rows of a whole segment; ``form``: the segment sum (``rows [segment, in] ->
    LowerGram``); ``keep``: when not empty, the tail rows start a straddling segment this worker forms: it keeps
    them under this name for the next :meth:`~qlooper.shard_worker.LayerWorker.straddle` call instead of
    returning them; ``hold``: the worker keeps the whole segments' sums it forms (and a straddling one) for the
    chained reduce (:meth:`~qlooper.shard_worker.LayerWorker.chain`) instead of returning them."""

    in_features: int
    expected: tuple[int, ...] | None = None
    head: int = 0
    segment: int = 0
    form: Callable[[torch.Tensor], LowerGram] = segment_sum
    keep: str = ""
    hold: bool = False


@dataclass(frozen=True)
class Straddle:
    """A whole segment lying across shards: worker ``owner`` holds its first rows (its tail), the workers
    ``senders`` (in order) the head rows that complete it."""

    owner: int
    senders: tuple[int, ...]


def straddles(first: int, segment: int, rows: Sequence[int]) -> list[Straddle]:
    """The whole segments of an input's stream that straddle shards, in stream order. ``first``: rows before
    the accumulator's first segment boundary (``rows_to_boundary``, 0 at a boundary); ``segment``: rows of a
    whole segment; ``rows``: each worker's token rows, in shard order. A segment counts only when the stream
    holds all its rows (the last, partial one stays rows)."""
    starts = [sum(rows[:w]) for w in range(len(rows))]
    total, out, at = sum(rows), [], first
    while segment > 0 and at + segment <= total:
        end = at + segment
        owner = next(w for w, n in enumerate(rows) if starts[w] <= at < starts[w] + n)
        if end > starts[owner] + rows[owner]:
            senders = tuple(w for w in range(owner + 1, len(rows)) if rows[w] and starts[w] < end)
            out.append(Straddle(owner, senders))
        at = end
    return out


class ShardRows(NamedTuple):
    """What a worker returns for one planned module (a tuple, so executors count its tensors' bytes).

    ``counts``: token rows per call; ``head`` / ``tail``: rows ``[k, in]`` in the input's dtype (empty for a
    count-only plan); ``segments``: each whole segment's lower-triangle float64 blocks
    (:meth:`qalgos.hessian.LowerGram.block_list`); ``seconds``: forming the segment sums; ``mismatch``: why the
    rows differ from ``expected`` (the other fields are then meaningless), else None; ``kept``: tail rows kept
    on the worker for a straddling segment (``RowPlan.keep``; ``tail`` is then empty); ``held``: whole segments'
    sums formed and kept on the worker for the chained reduce (``RowPlan.hold``; ``segments`` is then empty)."""

    counts: list[int]
    head: torch.Tensor
    segments: list[list[torch.Tensor]]
    tail: torch.Tensor
    seconds: float
    mismatch: str | None
    kept: int = 0
    held: int = 0


class RowCollector:
    """A worker's forward hook for one planned module: counts rows per call and, for a statistic, splits the
    rows into head, whole segments (summed as soon as they are complete) and tail (:class:`RowPlan`)."""

    def __init__(self, name: str, plan: RowPlan, masks: Sequence[torch.Tensor]) -> None:
        self.name, self.plan, self.masks = name, plan, masks
        self.batch = -1
        self.counts: list[int] = []
        self.head: torch.Tensor | None = None
        self.segments: list[list[torch.Tensor]] = []
        self.seconds = 0.0
        self.mismatch: str | None = None
        self.kept: torch.Tensor | None = None  # the tail rows kept for a straddling segment (after result())
        self.held: list[LowerGram] = []  # whole segments' sums kept for the chained reduce (RowPlan.hold)
        self._rows: list[torch.Tensor] = []
        self._held = 0
        self._in_batch = 0

    def start_batch(self, batch: int) -> None:
        self.batch, self._in_batch = batch, 0

    def __call__(self, _m: nn.Module, inputs: tuple[Any, ...], _out: Any) -> None:
        x = first_tensor(inputs).detach()
        if self.plan.expected is None:  # a count only
            self.counts.append(tokens_in(self.masks[self.batch], x))
            return
        if x.shape[-1] != self.plan.in_features:
            self.mismatch = f"input width {x.shape[-1]}, expected {self.plan.in_features}"
            return
        mask = matching_mask(self.masks[self.batch], x)
        flat = x.reshape(-1, x.shape[-1])
        rows = flat[mask.reshape(-1).to(device=flat.device, dtype=torch.bool)] if mask is not None else flat
        self.counts.append(int(rows.shape[0]))
        self._in_batch += int(rows.shape[0])
        if self.mismatch is None:
            self._push(rows if mask is not None else rows.clone())  # a view of the input: copy it

    def end_batch(self) -> None:
        expected = self.plan.expected
        if expected is not None and self.mismatch is None and self._in_batch != expected[self.batch]:
            self.mismatch = f"batch {self.batch}: {self._in_batch} token rows, predicted {expected[self.batch]}"

    def _push(self, rows: torch.Tensor) -> None:
        self._rows.append(rows)
        self._held += int(rows.shape[0])
        if self.head is None:
            if self._held < self.plan.head:
                return
            self.head = self._take(self.plan.head)
        while self._held >= self.plan.segment > 0:
            start = time.perf_counter()
            formed = self.plan.form(self._take(self.plan.segment))
            if self.plan.hold:
                self.held.append(formed)
            else:
                self.segments.append(formed.block_list())
            self.seconds += time.perf_counter() - start

    def _take(self, count: int) -> torch.Tensor:
        """The first ``count`` held rows (the rest stay held)."""
        held = torch.cat(self._rows) if len(self._rows) > 1 else self._rows[0]
        self._rows, self._held = ([held[count:]] if count < held.shape[0] else []), self._held - count
        return held[:count]

    def result(self) -> ShardRows:
        width = self.plan.in_features
        held = torch.cat(self._rows) if self._rows else torch.zeros(0, width)
        head = self.head
        if head is None:  # fewer rows than the head: all of them are head rows
            head, held = held, held[:0]
        if self.plan.keep:
            self.kept = held
            kept = int(held.shape[0])
            return ShardRows(
                self.counts, head, self.segments, held[:0], self.seconds, self.mismatch, kept, len(self.held)
            )
        return ShardRows(self.counts, head, self.segments, held, self.seconds, self.mismatch, 0, len(self.held))


def plannable(module: nn.Module) -> HessianRowsHook | bool:
    """Whether a worker can serve every hook of ``module`` without recording its input: its
    :class:`HessianRowsHook` (at most one; the rest token counts) or True (only token counts); False when
    any other hook or a pre-hook is there."""
    if module._forward_pre_hooks or not module._forward_hooks:
        return False
    statistic: HessianRowsHook | None = None
    for hook in module._forward_hooks.values():
        if isinstance(hook, HessianRowsHook) and statistic is None:
            statistic = hook
        elif not isinstance(hook, TokenCountHook):
            return False
    return statistic if statistic is not None else True


def feed_rows(
    module: nn.Module,
    pieces: Sequence[ShardRows],
    layout: Sequence[Straddle] = (),
    sums: Sequence[list[torch.Tensor]] = (),
) -> int:
    """Feed every worker's result for a planned ``module`` to its hooks, worker by worker in order; ``layout``
    (:func:`straddles`) and ``sums`` (each straddling segment's blocks, formed by its owner, in that order)
    place the straddling segments. Returns the token rows added as rows (whose chunk products the driver
    forms)."""
    if len(layout) != len(sums):
        raise ValueError(f"straddling segments: {len(layout)} planned, {len(sums)} sums came back")
    by_owner = {s.owner: blocks for s, blocks in zip(layout, sums, strict=True)}
    sent = {w for s in layout for w in s.senders}
    rows = 0
    for hook in list(module._forward_hooks.values()):
        for w, shard in enumerate(pieces):
            if isinstance(hook, HessianRowsHook):
                rows += hook.add_pieces(shard, head_sent=w in sent, straddle=by_owner.get(w))
            elif isinstance(hook, TokenCountHook):
                hook.add(sum(shard.counts))
    return rows


def feed_chained(
    module: nn.Module, pieces: Sequence[ShardRows], layout: Sequence[Straddle], total: LowerGram, segments: int
) -> int:
    """Feed a chained input's result to ``module``'s hooks: the chained total of its ``segments`` whole
    segments (:meth:`HessianRowsHook.add_chained`) and the token counts. Returns the rows added as rows."""
    sent = {w for s in layout for w in s.senders}
    rows = 0
    for hook in list(module._forward_hooks.values()):
        if isinstance(hook, HessianRowsHook):
            rows += hook.add_chained(pieces, total, segments, sent)
        elif isinstance(hook, TokenCountHook):
            hook.add(sum(sum(shard.counts) for shard in pieces))
    return rows


def sum_bytes(pieces: Sequence[ShardRows]) -> int:
    """Bytes of the segment sums in ``pieces``."""
    return sum(block.numel() * block.element_size() for shard in pieces for seg in shard.segments for block in seg)
