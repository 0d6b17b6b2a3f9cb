"""Streaming accumulation of the GPTQ Hessian ``H = 2/N * sum_t x_t x_tᵀ`` from activation batches.

Tokens are copied into a fixed float32 buffer of up to :func:`buffer_tokens` rows (4096 rows, at most 256 MiB);
each full buffer's product ``xᵀx`` is formed in float32 (like the reference) and added to a running sum kept
unscaled in float64, with the token count kept separately; so many batches do not lose precision. The sum
is symmetric, so only its lower-triangle blocks are stored (:class:`LowerGram`: ``(k + 1) / 2k`` of ``[in, in]``
with ``k`` blocks a side, up to :data:`GRAM_BLOCKS` = 8: 36/64 for ``in`` = 14336, 0.92 GB where four blocks held
1.03 GB and a full sum 1.64 GB);
the float32 Hessian mirrors them, value for value what a full ``[in, in]`` sum would hold. Wide inputs (an 8B
model's ``down_proj``, ``in`` = 14336) were 27% faster per token with 4096-row buffers than with the 1170 rows
a 64 MiB buffer held (fewer float64 additions per token) and another 15% with eight blocks a side instead of
four (fewer multiply-adds), on 2 cores. Blocks are at least ``GRAM_MIN_BLOCK`` = 1024 columns wide: narrower
blocks made the products slower than one full ``xᵀx`` (``in`` = 1536: 339 ms for the ten 384-wide blocks, 209
ms for the one full product, per 4096 tokens on 2 cores), so inputs under 2048 form one full product (their
sums are small). A block's float32 values equal the full product's bit for bit (the GEMM's reduction over
tokens does not depend on the output tiling; ``test_hessian`` holds it for blocks from 256 columns; on an Intel
Xeon with AMX, MKL's products into 72- and 192-column blocks differ in the last bits), so the block width never
changes a result. Buffering makes the products large matmuls (a 256-token batch
alone is a thin one: 3.4x slower per token for ``in`` = 5632 here). Chunk boundaries depend only on token
counts, never on batch sizes' timing or the thread count, and a state dict carries the unflushed rows, so
a resumed accumulator continues exactly where it stopped.

**Two-level order.** The float64 sum has a fixed association that does not depend on where it is formed: the
float32 chunk products are added into a *segment* sum that starts from zero; a segment is
:data:`SEGMENT_CHUNKS` = 8 chunks (:func:`segment_tokens` rows: 32768 for inputs up to 4096 columns); each
completed segment's sum is added to the running total, and the last, partial segment when the Hessian is
taken. So a whole segment can be formed anywhere (:func:`segment_sum`, what a shard worker calls on its rows)
and added by :meth:`HessianAccumulator.add_segment` at a segment boundary, with the same bits as accumulating
its rows in place. Up to one segment the total is ``0 + segment``, exactly the one-level sum of earlier
releases; longer inputs keep a second float64 sum for the open segment (one :class:`LowerGram` more while
it is open).

The buffer and the sum live on the device of the activations (the first batch's; a CUDA layer's Hessian
accumulates on the GPU); :meth:`HessianAccumulator.hessian` and the state dict are CPU tensors.
"""

from __future__ import annotations

import torch

from .errors import ShapeError, StateError
from .finite_check import all_finite

GRAM_BLOCKS = 8
GRAM_MIN_BLOCK = 1024
BUFFER_BYTES = 256 * 1024 * 1024
MAX_BUFFER_TOKENS = 4096
MIN_BUFFER_TOKENS = 256
SEGMENT_CHUNKS = 8


def buffer_tokens(in_features: int) -> int:
    """Rows of the float32 token buffer for ``in_features`` inputs: 256 MiB worth, within [256, 4096] (4096 up to
    ``in`` = 16384; so every input of up to 4096 columns keeps the chunks, and the bits, it had with 64 MiB)."""
    return max(MIN_BUFFER_TOKENS, min(MAX_BUFFER_TOKENS, BUFFER_BYTES // (4 * in_features)))


def segment_tokens(in_features: int) -> int:
    """Rows of one whole segment for ``in_features`` inputs: :data:`SEGMENT_CHUNKS` chunks of
    :func:`buffer_tokens` rows."""
    return SEGMENT_CHUNKS * buffer_tokens(in_features)


def segment_sum(rows: torch.Tensor) -> LowerGram:
    """The float64 sum of one whole segment: ``rows`` ``[segment_tokens(in), in]`` (any floating dtype; the
    token rows, padding already removed) go through an accumulator's own buffer and chunk products, so the
    sum is bit for bit what an accumulator forms from the same rows starting at a segment boundary
    (:meth:`HessianAccumulator.add_segment` adds it). Raises ShapeError for another row count."""
    if not isinstance(rows, torch.Tensor) or rows.ndim != 2:
        found = tuple(rows.shape) if isinstance(rows, torch.Tensor) else type(rows).__name__
        raise ShapeError(f"rows: expected a [tokens, in] tensor of one segment, found {found}")
    n = int(rows.shape[1])
    if n == 0 or rows.shape[0] != segment_tokens(n):
        raise ShapeError(
            f"rows: expected one whole segment of {segment_tokens(n) if n else 'n/a'} rows "
            f"({SEGMENT_CHUNKS} chunks of {buffer_tokens(n) if n else 'n/a'}) for in = {n}, found {rows.shape[0]}"
        )
    acc = HessianAccumulator(n)
    acc.add_batch(rows)
    if acc.gram is None or acc._segments != 1 or acc._segment_chunks != 0:  # the 8th chunk closed it
        raise StateError("segment_sum: the rows did not close exactly one segment")
    return acc.gram


def add_gram(acc: torch.Tensor, x: torch.Tensor) -> None:
    """``acc += xᵀx`` for ``x [tokens, in]`` float32 into a float64 ``acc [in, in]``.

    The product is formed in float32 (as the reference does) block by block over the lower triangle and
    mirrored, which saves up to 3/8 of the multiply-adds of a full ``xᵀx``; the blocks are added in a fixed
    order into the float64 sum.
    """
    edges = gram_edges(x.shape[1])
    parts = len(edges) - 1
    for i in range(parts):
        rows = slice(edges[i], edges[i + 1])
        for j in range(i + 1):
            cols = slice(edges[j], edges[j + 1])
            block = (x[:, rows].T @ x[:, cols]).to(torch.float64)
            acc[rows, cols] += block
            if i != j:
                acc[cols, rows] += block.T


def gram_edges(n: int) -> list[int]:
    """Block edges of :func:`add_gram` / :class:`LowerGram` over ``n`` inputs (up to ``GRAM_BLOCKS`` parts)."""
    parts = max(1, min(GRAM_BLOCKS, n // GRAM_MIN_BLOCK))
    return [n * k // parts for k in range(parts + 1)]


class LowerGram:
    """The float64 sum ``Σ xᵀx`` ``[n, n]`` kept as its lower-triangle blocks (``j <= i`` of
    :func:`gram_edges`); block ``(j, i)`` is the transpose of ``(i, j)``.

    :meth:`add` performs the same float32 block products and float64 additions, in the same order, as
    :func:`add_gram` on a full matrix, so :meth:`full` equals that matrix exactly."""

    def __init__(self, n: int, device: torch.device | str = "cpu") -> None:
        self.n = n
        self.edges = gram_edges(n)
        self.blocks = self._views(device)

    def _pairs(self) -> list[tuple[int, int]]:
        parts = len(self.edges) - 1
        return [(i, j) for i in range(parts) for j in range(i + 1)]

    def _views(self, device: torch.device | str) -> dict[tuple[int, int], torch.Tensor]:
        """The blocks of each block row as views of one allocation per row (each row is freed at once, as one
        mapping, when its last view goes: :meth:`scaled_into` with ``consume`` frees the rows as it goes;
        dozens of separate blocks of a few MB would stay in the allocator's heap until it is trimmed)."""
        blocks = {}
        for i in range(len(self.edges) - 1):
            row = torch.zeros(self._size(i) * self.edges[i + 1], dtype=torch.float64, device=device)
            offset = 0
            for j in range(i + 1):
                size = self._size(i) * self._size(j)
                blocks[i, j] = row[offset : offset + size].view(self._size(i), self._size(j))
                offset += size
        return blocks

    @property
    def device(self) -> torch.device:
        """Where the blocks live."""
        return self.blocks[0, 0].device

    def to(self, device: torch.device) -> LowerGram:
        """This sum on ``device`` (itself when it is there already; the values are copied exactly)."""
        return self if self.device == device else LowerGram.from_full(self.full().to(device))

    def _size(self, k: int) -> int:
        return self.edges[k + 1] - self.edges[k]

    def _span(self, k: int) -> slice:
        return slice(self.edges[k], self.edges[k + 1])

    def add(self, x: torch.Tensor) -> None:
        """Add ``xᵀx`` for float32 ``x [tokens, n]``.

        Each block's float32 product is written into one scratch matrix (the largest block's size, shared by
        the blocks in turn) and added to its float64 block in place: the same product and the same float64
        additions as ``acc += product.to(float64)``, without a fresh float32 and float64 block per product
        (two allocations, and a pass over memory, fewer each: 7% less CPU for an ``in`` = 14336 chunk)."""
        widest = max(self._size(k) for k in range(len(self.edges) - 1))
        scratch = torch.empty(widest * widest, dtype=torch.float32, device=x.device)
        for (i, j), acc in self.blocks.items():
            product = scratch[: acc.numel()].view(acc.shape)
            torch.mm(x[:, self._span(i)].T, x[:, self._span(j)], out=product)
            acc.add_(product)

    def add_sum(self, other: LowerGram) -> None:
        """Add another float64 sum of the same width block by block (``self += other``, in block order)."""
        if other.n != self.n or other.edges != self.edges:
            raise ShapeError(f"sum: expected a LowerGram of width {self.n}, found width {other.n}")
        for pair, acc in self.blocks.items():
            acc += other.blocks[pair].to(acc.device)

    def block_list(self) -> list[torch.Tensor]:
        """The lower-triangle blocks in block order (``(i, j)`` for ``j <= i``), what :meth:`from_blocks` takes."""
        return [self.blocks[pair] for pair in self._pairs()]

    @property
    def nbytes(self) -> int:
        """Bytes of the float64 blocks (the lower triangle, about ``(k + 1) / 2k`` of ``[n, n]``)."""
        return sum(block.numel() * block.element_size() for block in self.blocks.values())

    @classmethod
    def from_blocks(cls, n: int, blocks: list[torch.Tensor]) -> LowerGram:
        """A sum over ``n`` inputs made of :meth:`block_list`'s blocks (float64, in block order; adopted, not
        copied). Raises ShapeError naming the block whose shape or dtype is wrong."""
        gram = cls.__new__(cls)
        gram.n, gram.edges = n, gram_edges(n)
        pairs = gram._pairs()
        if not isinstance(blocks, (list, tuple)) or len(blocks) != len(pairs):
            found = len(blocks) if isinstance(blocks, (list, tuple)) else type(blocks).__name__
            raise ShapeError(f"blocks: expected {len(pairs)} lower-triangle blocks for width {n}, found {found}")
        gram.blocks = {}
        for (i, j), block in zip(pairs, blocks, strict=True):
            shape = (gram._size(i), gram._size(j))
            if not isinstance(block, torch.Tensor) or tuple(block.shape) != shape or block.dtype != torch.float64:
                got = f"{block.dtype} {tuple(block.shape)}" if isinstance(block, torch.Tensor) else type(block).__name__
                raise ShapeError(f"blocks[{i}, {j}]: expected float64 {shape}, found {got}")
            gram.blocks[i, j] = block
        return gram

    def scaled_into(self, out: torch.Tensor, scale: float, *, consume: bool = False) -> None:
        """``out [n, n] = sum * scale`` (each block scaled in float64, then cast to ``out``'s dtype).

        ``consume``: the sum is given up; its block rows are written last row first and each is freed as soon
        as it is written, so the float64 sum and a float32 ``out`` never both live whole (at ``n`` = 14336:
        1.11 GB at most instead of 1.74 GB, ``out`` being fresh zero pages that become resident as they are
        written). Every value is the same; afterwards the sum holds no block."""
        if not consume:
            for (i, j), acc in self.blocks.items():
                self._write(out, i, j, acc, scale)
            return
        for i in reversed(range(len(self.edges) - 1)):
            for j in range(i + 1):
                self._write(out, i, j, self.blocks.pop((i, j)), scale)

    def _write(self, out: torch.Tensor, i: int, j: int, acc: torch.Tensor, scale: float) -> None:
        """Block ``(i, j)`` of ``out`` and its mirror ``(j, i)``: ``acc * scale`` cast to ``out``'s dtype."""
        part = acc * scale
        out[self._span(i), self._span(j)] = part
        if i != j:
            out[self._span(j), self._span(i)] = part.T

    def full(self) -> torch.Tensor:
        """The whole float64 sum ``[n, n]`` (a new tensor)."""
        out = torch.empty(self.n, self.n, dtype=torch.float64, device=self.device)
        self.scaled_into(out, 1.0)
        return out

    @classmethod
    def from_full(cls, total: torch.Tensor) -> LowerGram:
        """Blocks copied from a full float64 sum ``[n, n]`` (its lower triangle; the sum is symmetric)."""
        gram = cls(int(total.shape[0]), device=total.device)
        for (i, j), block in gram.blocks.items():
            block.copy_(total[gram._span(i), gram._span(j)])
        return gram


class HessianAccumulator:
    """Accumulates ``sum x xᵀ`` over tokens ``x: [in]``; masked tokens are excluded (see the module docstring).

    ``gram`` (:class:`LowerGram`, float64) holds the closed segments' total, or, while no segment was closed,
    the open segment itself (the total is then ``0 + segment``: no second sum is kept); after the first segment
    the open one has its own sum. Up to :func:`buffer_tokens` more rows wait in the buffer. :meth:`hessian`
    flushes and closes the open segment first. :meth:`release` frees everything once the Hessian was taken.
    """

    def __init__(self, in_features: int) -> None:
        if in_features <= 0:
            raise ShapeError(f"in_features: expected a positive integer, found {in_features}")
        self.in_features = in_features
        self.gram: LowerGram | None = None  # made at the first chunk (:meth:`_sum`)
        self._device = torch.device("cpu")  # where the sums and the buffer live
        self.nsamples = 0
        self._buffer: torch.Tensor | None = None
        self._buffered = 0
        self._segment: LowerGram | None = None  # the open segment's own sum (only after a segment was closed)
        self._segments = 0  # closed segments
        self._segment_chunks = 0  # chunks in the open segment
        self._released = False

    def _check_live(self) -> None:
        if self._released:
            raise StateError("the Hessian statistics were released after the solve; start a new accumulator")

    def add_batch(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> int:
        """Add activations ``x: [..., in]``; ``mask: [...]`` bool keeps the True tokens. Returns tokens added."""
        self._check_live()
        if not isinstance(x, torch.Tensor) or x.ndim < 1 or x.shape[-1] != self.in_features:
            found = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ShapeError(f"x: expected [..., {self.in_features}] activations, found {found}")
        if not x.dtype.is_floating_point:
            raise ShapeError(f"x: expected a floating dtype, found {x.dtype}")
        flat = x.detach().reshape(-1, self.in_features)
        if mask is not None:
            if not isinstance(mask, torch.Tensor) or tuple(mask.shape) != tuple(x.shape[:-1]):
                found = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
                raise ShapeError(f"mask: expected shape {tuple(x.shape[:-1])} matching x[..., :-1], found {found}")
            flat = flat[mask.reshape(-1).to(torch.bool)]
        tokens = int(flat.shape[0])
        if tokens == 0:
            return 0
        if not all_finite(flat):
            raise ShapeError("x: activations contain NaN or infinity")
        self._place(flat.device)
        capacity = buffer_tokens(self.in_features)
        start = 0
        while start < tokens:
            take = min(tokens - start, capacity - self._buffered)
            buffer = self._room(self._buffered + take)
            buffer[self._buffered : self._buffered + take].copy_(flat[start : start + take])
            self._buffered += take
            start += take
            if self._buffered == capacity:
                self._flush()
        self.nsamples += tokens
        return tokens

    def rows_to_boundary(self) -> int:
        """Rows this accumulator takes before it stands at a segment boundary (0 when it does: nothing
        buffered and no chunk in the open segment), where :meth:`add_segment` is legal."""
        self._check_live()
        whole = segment_tokens(self.in_features)
        return (whole - self._segment_chunks * buffer_tokens(self.in_features) - self._buffered) % whole

    def add_segment(self, total: LowerGram, tokens: int) -> None:
        """Add a whole segment's float64 sum (:func:`segment_sum` of its ``tokens`` rows, formed anywhere) at a
        segment boundary: the same bits as adding those rows with :meth:`add_batch`. Raises StateError when
        rows are buffered or the open segment has chunks, ShapeError for another width or row count."""
        self._check_live()
        if self._buffered or self._segment_chunks:
            raise StateError(
                "add_segment: expected the accumulator at a segment boundary (no buffered row and no chunk in the "
                f"open segment), found {self._buffered} buffered rows and {self._segment_chunks} of "
                f"{SEGMENT_CHUNKS} chunks in the open segment"
            )
        whole = segment_tokens(self.in_features)
        if int(tokens) != whole:
            raise ShapeError(
                f"tokens: expected one whole segment of {whole} rows ({SEGMENT_CHUNKS} chunks of "
                f"{buffer_tokens(self.in_features)}), found {tokens}"
            )
        if not isinstance(total, LowerGram) or total.n != self.in_features:
            found = f"width {total.n}" if isinstance(total, LowerGram) else type(total).__name__
            raise ShapeError(f"total: expected a LowerGram of width {self.in_features}, found {found}")
        self._sum().add_sum(total)  # with no closed segment the total is zero: 0 + segment, the segment exactly
        self._segments += 1
        self.nsamples += whole

    def chain_start(self) -> LowerGram | None:
        """What a chain of whole segments' sums formed elsewhere starts from, at a segment boundary: None while
        no segment was closed (the total is zero, so the running total is the first segment's sum itself:
        ``0 + s`` is ``s`` exactly), else the closed segments' total. Raises StateError off a boundary."""
        self._check_live()
        if self._buffered or self._segment_chunks:
            raise StateError(
                f"chain_start: expected the accumulator at a segment boundary, found {self._buffered} buffered rows "
                f"and {self._segment_chunks} of {SEGMENT_CHUNKS} chunks in the open segment"
            )
        return self._sum() if self._segments else None

    def add_chained(self, total: LowerGram, segments: int) -> None:
        """Take ``total``: :meth:`chain_start`'s total with ``segments`` whole segments' sums added to it one by
        one in stream order (:meth:`LowerGram.add_sum`, e.g. worker by worker), the same float64 additions in
        the same order as :meth:`add_segment` of each: the same bits. Raises StateError off a boundary,
        ShapeError for another width or a segment count below 1."""
        self.chain_start()
        if not isinstance(total, LowerGram) or total.n != self.in_features:
            found = f"width {total.n}" if isinstance(total, LowerGram) else type(total).__name__
            raise ShapeError(f"total: expected a LowerGram of width {self.in_features}, found {found}")
        if int(segments) < 1:
            raise ShapeError(f"segments: expected at least 1 whole segment in a chained total, found {segments}")
        self.gram = total
        self._segments += int(segments)
        self.nsamples += int(segments) * segment_tokens(self.in_features)

    def _sum(self) -> LowerGram:
        """The float64 sum (:attr:`gram`), made (zeros, on the accumulator's device) when first needed: an
        accumulator that has seen no whole chunk holds no ``[in, in]`` sum. An MoE layer keeps one accumulator per
        expert input alive through its capture (128 experts x 2 inputs at the 30B-A3B shape), each seeing a few
        hundred tokens: made up front, their sums alone were 3.8 GB."""
        if self.gram is None:
            self.gram = LowerGram(self.in_features, device=self._device)
        return self.gram

    def _room(self, rows: int) -> torch.Tensor:
        """The float32 token buffer with room for ``rows`` rows (at most :func:`buffer_tokens`): allocated for
        what arrives and doubled when more does (the buffered rows copied over), so an input that sees few tokens
        (an MoE expert's) holds few rows, not the whole chunk (4096 x 2048 float32 = 32 MiB per expert input
        at the 30B-A3B shape). Chunk boundaries depend on :func:`buffer_tokens` alone, never on this size."""
        current = self._buffer
        if current is not None and current.shape[0] >= rows:
            return current
        capacity = buffer_tokens(self.in_features)
        size = max(rows, MIN_BUFFER_TOKENS) if current is None else max(rows, 2 * int(current.shape[0]))
        grown = torch.empty(min(size, capacity), self.in_features, device=self._device)
        if current is not None and self._buffered:
            grown[: self._buffered].copy_(current[: self._buffered])
        self._buffer = grown
        return grown

    def _place(self, device: torch.device) -> None:
        """Buffer and sums on ``device`` (the activations'): made there when they are made, or moved there exactly
        (a resumed accumulator's CPU state continuing on a GPU)."""
        self._device = torch.device(device)
        if self.gram is not None:
            self.gram = self.gram.to(self._device)
        if self._segment is not None:
            self._segment = self._segment.to(self._device)
        if self._buffer is not None and self._buffer.device != self._device:
            self._buffer = self._buffer.to(self._device)

    def _flush(self) -> None:
        """Add the buffered rows' product (a chunk) to the open segment; close the segment at its last chunk."""
        if self._buffered and self._buffer is not None:
            if self._segments == 0:
                target = self._sum()  # the total is zero: the first segment is summed in place
            else:
                if self._segment is None:
                    self._segment = LowerGram(self.in_features, device=self._device)
                target = self._segment
            target.add(self._buffer[: self._buffered])
            self._segment_chunks += 1
            if self._segment_chunks == SEGMENT_CHUNKS:
                self._close_segment()
        self._buffered = 0

    def _close_segment(self) -> None:
        """Add the open segment's sum to the total (nothing to add for the first: it is summed in place)."""
        if not self._segment_chunks:
            return
        if self._segments and self._segment is not None:
            self._sum().add_sum(self._segment)
            for block in self._segment.blocks.values():
                block.zero_()  # reused by the next segment
        self._segments += 1
        self._segment_chunks = 0

    def hessian(self, *, release: bool = False) -> torch.Tensor:
        """``2/N * sum x xᵀ`` as float32 ``[in, in]`` on the CPU (zeros when no token was seen).

        Flushes the buffered rows and closes the open segment first (later rows start a new segment).
        Formed block by block on the sum's device, so no float64 temporary of the full size is made.
        ``release``: :meth:`release` as well, freeing the sum's block rows while the Hessian is formed
        (:meth:`LowerGram.scaled_into` with ``consume``; the same values)."""
        self._check_live()
        self._flush()
        self._close_segment()
        self._segment = None
        gram = self.gram
        if release:
            self.release()
        if self.nsamples == 0 or gram is None:
            return torch.zeros(self.in_features, self.in_features, dtype=torch.float32)
        out = torch.zeros(self.in_features, self.in_features, dtype=torch.float32, device=gram.device)
        gram.scaled_into(out, 2.0 / self.nsamples, consume=release)
        del gram
        return out.cpu()

    def release(self) -> None:
        """Free the sums and the buffer (after the last solve that needs them); later calls raise StateError."""
        self.gram = None
        self._segment = None
        self._buffer = None
        self._buffered = 0
        self._segment_chunks = 0
        self._released = True

    def state_dict(self) -> dict[str, torch.Tensor | int]:
        """``{"hessian_sum": float64 [in, in], "pending": float32 [k, in], "nsamples": int, "in_features": int,
        "segments": int, "segment_chunks": int}`` plus ``"segment_sum"`` float64 ``[in, in]`` when a segment was
        closed and the open one has chunks (CPU copies). ``hessian_sum`` is the closed segments' total, or while
        none was closed (``segments`` 0) the open segment's sum; ``segment_chunks`` counts the open segment's
        chunks; ``pending`` holds the k tokens not yet in a chunk."""
        self._check_live()
        pending = (
            self._buffer[: self._buffered].cpu().clone()
            if self._buffer is not None
            else torch.zeros(0, self.in_features, dtype=torch.float32)
        )
        state: dict[str, torch.Tensor | int] = {
            "hessian_sum": self._sum().full().cpu(),
            "pending": pending,
            "nsamples": self.nsamples,
            "in_features": self.in_features,
            "segments": self._segments,
            "segment_chunks": self._segment_chunks,
        }
        if self._segments and self._segment_chunks:
            segment = self._segment if self._segment is not None else LowerGram(self.in_features)
            state["segment_sum"] = segment.full().cpu()
        return state

    def load_state_dict(self, state: dict[str, torch.Tensor | int | float]) -> None:
        """Restore from :meth:`state_dict`; names the key that is missing or wrong (``pending`` is optional).

        A state without the segment fields (written before the two-level order) loads when its sum holds at
        most one segment of tokens (it is then exactly the open segment's sum) and raises StateError otherwise
        (its float64 sum cannot be split into segments)."""
        for key in ("hessian_sum", "nsamples", "in_features"):
            if key not in state:
                raise StateError(f"{key}: missing from the GPTQ state (found keys {sorted(state)})")
        if int(state["in_features"]) != self.in_features:
            raise StateError(f"in_features: expected {self.in_features}, found {state['in_features']}")
        shape = (self.in_features, self.in_features)
        total = _checked_sum(state, "hessian_sum", shape)
        nsamples = int(state["nsamples"])
        if nsamples < 0:
            raise StateError(f"nsamples: expected >= 0, found {nsamples}")
        pending = state.get("pending")
        capacity = buffer_tokens(self.in_features)
        if pending is not None and (
            not isinstance(pending, torch.Tensor)
            or pending.ndim != 2
            or pending.shape[1] != self.in_features
            or pending.shape[0] >= capacity
        ):
            found = tuple(pending.shape) if isinstance(pending, torch.Tensor) else type(pending).__name__
            raise StateError(f"pending: expected a tensor [k < {capacity}, {self.in_features}], found {found}")
        buffered = int(pending.shape[0]) if pending is not None else 0
        segments, chunks = self._segment_position(state, nsamples - buffered)
        segment = _checked_sum(state, "segment_sum", shape) if segments and chunks else None
        self.gram = LowerGram.from_full(total.detach())
        self._device = self.gram.device
        self._segment = LowerGram.from_full(segment.detach()) if segment is not None else None
        self._segments, self._segment_chunks = segments, chunks
        self.nsamples = nsamples
        self._released = False
        self._buffer, self._buffered = None, 0
        if pending is not None and pending.shape[0]:
            self._room(int(pending.shape[0]))[: pending.shape[0]].copy_(pending)
            self._buffered = int(pending.shape[0])

    def _segment_position(self, state: dict[str, torch.Tensor | int | float], summed: int) -> tuple[int, int]:
        """``(closed segments, chunks in the open segment)`` of a state whose sum holds ``summed`` tokens."""
        capacity = buffer_tokens(self.in_features)
        if "segment_chunks" in state or "segments" in state:
            segments, chunks = int(state.get("segments", -1)), int(state.get("segment_chunks", -1))
            if segments < 0 or not 0 <= chunks < SEGMENT_CHUNKS:
                raise StateError(
                    f"segments / segment_chunks: expected >= 0 and 0 <= chunks < {SEGMENT_CHUNKS}, found "
                    f"{state.get('segments')!r} / {state.get('segment_chunks')!r}"
                )
            return segments, chunks
        whole = segment_tokens(self.in_features)
        if summed > whole:
            raise StateError(
                f"hessian_sum: a state without segment fields (saved before the two-level summation order) holds "
                f"{summed} tokens in its float64 sum, more than one segment ({whole} rows = {SEGMENT_CHUNKS} chunks "
                f"of {capacity}); its sum cannot be split into segments: accumulate these statistics again"
            )
        if summed == 0:
            return 0, 0
        if summed % capacity or summed == whole:  # a partial chunk (the Hessian was taken) or a full segment: closed
            return 1, 0
        return 0, summed // capacity


def _checked_sum(state: dict[str, torch.Tensor | int | float], key: str, shape: tuple[int, int]) -> torch.Tensor:
    """``state[key]``: a tensor of ``shape`` (StateError naming the key otherwise)."""
    total = state.get(key)
    if not isinstance(total, torch.Tensor) or tuple(total.shape) != shape:
        found = tuple(total.shape) if isinstance(total, torch.Tensor) else type(total).__name__
        raise StateError(f"{key}: expected a tensor of shape {shape}, found {found}")
    return total
