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
tokens does not depend on the output tiling; ``test_hessian`` holds it), so the block width never changes a
result. Buffering makes the products large matmuls (a 256-token batch
alone is a thin one: 3.4x slower per token for ``in`` = 5632 here). Chunk boundaries depend only on token
counts, never on batch sizes' timing or the thread count, and a state dict carries the unflushed rows, so
a resumed accumulator continues exactly where it stopped.

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


def buffer_tokens(in_features: int) -> int:
    """Rows of the float32 token buffer for ``in_features`` inputs: 256 MiB worth, within [256, 4096] (4096 up to
    ``in`` = 16384; so every input of up to 4096 columns keeps the chunks, and the bits, it had with 64 MiB)."""
    return max(MIN_BUFFER_TOKENS, min(MAX_BUFFER_TOKENS, BUFFER_BYTES // (4 * in_features)))


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
        """Add ``xᵀx`` for float32 ``x [tokens, n]``."""
        for (i, j), acc in self.blocks.items():
            acc += (x[:, self._span(i)].T @ x[:, self._span(j)]).to(torch.float64)

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

    ``gram`` (:class:`LowerGram`, float64) holds every flushed token; up to :func:`buffer_tokens` more wait in the
    buffer. :meth:`hessian` flushes first. :meth:`release` frees both once the Hessian was taken.
    """

    def __init__(self, in_features: int) -> None:
        if in_features <= 0:
            raise ShapeError(f"in_features: expected a positive integer, found {in_features}")
        self.in_features = in_features
        self.gram: LowerGram | None = LowerGram(in_features)
        self.nsamples = 0
        self._buffer: torch.Tensor | None = None
        self._buffered = 0
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
        buffer = self._place(flat.device)
        capacity = buffer.shape[0]
        start = 0
        while start < tokens:
            take = min(tokens - start, capacity - self._buffered)
            buffer[self._buffered : self._buffered + take].copy_(flat[start : start + take])
            self._buffered += take
            start += take
            if self._buffered == capacity:
                self._flush()
        self.nsamples += tokens
        return tokens

    def _new_buffer(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """The float32 token buffer ``[buffer_tokens(in), in]`` on ``device`` (contents undefined)."""
        return torch.empty(buffer_tokens(self.in_features), self.in_features, device=device)

    def _place(self, device: torch.device) -> torch.Tensor:
        """Buffer and sum on ``device`` (the activations'): made there, or moved there exactly (a resumed
        accumulator's CPU state continuing on a GPU). Returns the buffer."""
        if self.gram is not None:
            self.gram = self.gram.to(device)
        if self._buffer is None:
            self._buffer = self._new_buffer(device)
        elif self._buffer.device != device:
            self._buffer = self._buffer.to(device)
        return self._buffer

    def _flush(self) -> None:
        if self._buffered and self._buffer is not None and self.gram is not None:
            self.gram.add(self._buffer[: self._buffered])
        self._buffered = 0

    def hessian(self, *, release: bool = False) -> torch.Tensor:
        """``2/N * sum x xᵀ`` as float32 ``[in, in]`` on the CPU (zeros when no token was seen).

        Formed block by block on the sum's device, so no float64 temporary of the full size is made.
        ``release``: :meth:`release` as well, freeing the sum's block rows while the Hessian is formed
        (:meth:`LowerGram.scaled_into` with ``consume``; the same values)."""
        self._check_live()
        self._flush()
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
        """Free the sum and the buffer (after the last solve that needs them); later calls raise StateError."""
        self.gram = None
        self._buffer = None
        self._buffered = 0
        self._released = True

    def state_dict(self) -> dict[str, torch.Tensor | int]:
        """``{"hessian_sum": float64 [in, in], "pending": float32 [k, in], "nsamples": int, "in_features": int}``
        (CPU copies; ``pending`` holds the k tokens not yet added to the sum)."""
        self._check_live()
        pending = (
            self._buffer[: self._buffered].cpu().clone()
            if self._buffer is not None
            else torch.zeros(0, self.in_features, dtype=torch.float32)
        )
        return {
            "hessian_sum": self.gram.full().cpu() if self.gram is not None else torch.zeros(0, dtype=torch.float64),
            "pending": pending,
            "nsamples": self.nsamples,
            "in_features": self.in_features,
        }

    def load_state_dict(self, state: dict[str, torch.Tensor | int | float]) -> None:
        """Restore from :meth:`state_dict`; names the key that is missing or wrong (``pending`` is optional)."""
        for key in ("hessian_sum", "nsamples", "in_features"):
            if key not in state:
                raise StateError(f"{key}: missing from the GPTQ state (found keys {sorted(state)})")
        if int(state["in_features"]) != self.in_features:
            raise StateError(f"in_features: expected {self.in_features}, found {state['in_features']}")
        total = state["hessian_sum"]
        shape = (self.in_features, self.in_features)
        if not isinstance(total, torch.Tensor) or tuple(total.shape) != shape:
            found = tuple(total.shape) if isinstance(total, torch.Tensor) else type(total).__name__
            raise StateError(f"hessian_sum: expected a tensor of shape {shape}, found {found}")
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
        self.gram = LowerGram.from_full(total.detach())
        self.nsamples = nsamples
        self._released = False
        self._buffer, self._buffered = None, 0
        if pending is not None and pending.shape[0]:
            self._buffer = self._new_buffer(self.gram.device)
            self._buffer[: pending.shape[0]].copy_(pending)
            self._buffered = int(pending.shape[0])
