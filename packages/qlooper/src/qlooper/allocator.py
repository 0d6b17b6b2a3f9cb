"""Handing freed heap memory back to the operating system between the loop's phases.

glibc's allocator keeps freed blocks in its arenas for reuse; after a layer's forwards and solves (many
short-lived tensors of a few MB to a few hundred MB) the process can hold a gigabyte of freed memory that
still counts in its resident set. ``malloc_trim(0)`` returns every free page of every arena to the
system; it changes no value and takes milliseconds. Measured on the hidden-2048 benchmark: resident
memory after a layer fell from 1.41 to 1.01 GiB. On other C libraries (musl, macOS, Windows) this is a
no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)
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
