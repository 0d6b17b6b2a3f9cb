"""Handing freed heap memory back to the operating system between the loop's phases.

glibc's allocator keeps freed blocks in its arenas for reuse; after a layer's forwards and solves (many
short-lived tensors of a few MB to a few hundred MB) the process can hold a gigabyte of freed memory that
still counts in its resident set. ``malloc_trim(0)`` returns every free page of every arena to the
system; it changes no value and takes milliseconds. Measured on the hidden-2048 benchmark: resident
memory after a layer fell from 1.41 to 1.01 GiB. On other C libraries (musl, macOS, Windows) this is a
no-op.

glibc also raises its mmap threshold each time a large block is freed (the "dynamic" threshold, up to
32 MiB), so after the first layer the large tensors of every later layer come from the heap instead of their own
mappings, and the heap fragments: measured on a 1024-wide random llama streaming 8 layers, the peak resident
set of each layer drifted up by about 15 MiB a layer (846 to 960 MiB), and by depth 16 the whole run peaked
1.35x higher than at depth 4. :func:`pin_mmap_threshold` fixes the threshold at glibc's own starting value (128
KiB), which also switches the dynamic adjustment off: every large tensor gets its own mapping and goes back to
the system when freed, and the per-layer peaks stay flat (787-872 MiB over the same 8 layers). It changes no
value. A ``MALLOC_MMAP_THRESHOLD_`` set in the environment is the user's choice and is left alone.

The pin has a price where one phase makes the same temporaries over and over (AWQ's scale search replays a block
once per grid ratio: at Llama-3-8B's shape the MLP's ``[512, 14336]`` activations of each recorded call): each is a
fresh mapping whose every page the kernel zeroes on first touch, which on the measured host cost a quarter of an 8B
AWQ layer's CPU as system time. :func:`recycled_heap` scopes the opposite setting to such a phase: inside it,
blocks below :data:`RECYCLING_MMAP_THRESHOLD` (32 MiB) come from the heap and freed heap memory is kept (no
automatic trim), so the next ratio's temporaries reuse the previous ratio's pages; on leaving, the pinned threshold
and glibc's default trim threshold come back and every free page is returned (``malloc_trim``), so nothing of the
phase outlives it in the resident set and the peak stays flat in depth. Tensors the phase returns or keeps stay
valid (heap blocks are ordinary blocks); only the allocation pattern changes, never a value.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
from collections.abc import Callable, Iterator

#: ``mallopt``'s parameter number for the mmap threshold (glibc's ``M_MMAP_THRESHOLD``).
M_MMAP_THRESHOLD = -3
#: Bytes from which glibc serves an allocation with its own mapping once pinned (glibc's initial default).
PINNED_MMAP_THRESHOLD = 128 * 1024
#: ``mallopt``'s parameter number for the trim threshold (glibc's ``M_TRIM_THRESHOLD``).
M_TRIM_THRESHOLD = -1
#: glibc's default trim threshold (bytes of free memory at the heap's top it keeps before returning them).
DEFAULT_TRIM_THRESHOLD = 128 * 1024
#: Inside :func:`recycled_heap`: bytes from which an allocation still gets its own mapping (32 MiB, glibc's own
#: ceiling for its dynamic threshold on 64-bit systems). Blocks below it (a forward's per-call activations) are
#: recycled; larger ones (trial weights, held in scratch tensors by their owner) stay mappings, so the heap keeps no
#: large holes: at the 8B MLP shape 32 MiB saved as many page faults as 1 GiB for 0.02 instead of 0.43 GiB of extra
#: peak.
RECYCLING_MMAP_THRESHOLD = 32 << 20
#: Inside :func:`recycled_heap`: the trim threshold (the largest ``int``: glibc never trims on its own).
RECYCLING_TRIM_THRESHOLD = 2**31 - 1


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


@functools.lru_cache(maxsize=1)
def pin_mmap_threshold(threshold: int = PINNED_MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes for this process (module docstring); True when set.

    Once per process (cached); False on a C library without ``mallopt`` or when the environment already sets
    ``MALLOC_MMAP_THRESHOLD_``."""
    mallopt = _mallopt()
    if mallopt is None or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, threshold))


@functools.lru_cache(maxsize=1)
def _mallopt() -> Callable[[int, int], int] | None:
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None) if libc is not None else None
    if mallopt is None:
        return None
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt  # type: ignore[no-any-return]


_recycling_depth = 0


@contextlib.contextmanager
def recycled_heap() -> Iterator[bool]:
    """Serve large blocks from the heap and keep freed ones for reuse while inside; restore the pin and return
    every free page on leaving (module docstring). Yields True when in effect: where the pin is
    (:func:`pin_mmap_threshold`, applied here if the loop has not yet) and ``MALLOC_TRIM_THRESHOLD_`` is not set
    in the environment; otherwise a no-op yielding False. Nested uses act as one (the outermost restores)."""
    global _recycling_depth
    mallopt = _mallopt()
    if mallopt is None or not pin_mmap_threshold() or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        yield False
        return
    if _recycling_depth == 0:
        lifted = bool(mallopt(M_TRIM_THRESHOLD, RECYCLING_TRIM_THRESHOLD))
        lifted = lifted and bool(mallopt(M_MMAP_THRESHOLD, RECYCLING_MMAP_THRESHOLD))
    else:
        lifted = True
    _recycling_depth += 1
    try:
        yield lifted
    finally:
        _recycling_depth -= 1
        if _recycling_depth == 0:
            mallopt(M_MMAP_THRESHOLD, PINNED_MMAP_THRESHOLD)
            mallopt(M_TRIM_THRESHOLD, DEFAULT_TRIM_THRESHOLD)
            release_free_memory()


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Callable[[int], int] | None:
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None) if libc is not None else None
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


def release_free_memory() -> bool:
    """Return freed heap pages to the system (glibc); True when the C library offers ``malloc_trim``."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
