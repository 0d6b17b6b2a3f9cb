"""glibc's mmap threshold pinned by the loop (``qlooper.allocator.pin_mmap_threshold``), and lifted for a
phase by ``qlooper.allocator.recycled_heap``.

The allocator's state is process-wide, so each case runs in a fresh interpreter: a 4 MiB block is allocated
and freed (glibc then raises its dynamic threshold to 4 MiB), and a second 4 MiB block is allocated; glibc's
``mallinfo2().hblkhd`` (bytes in blocks with their own mapping) says where it came from.
"""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys

import pytest

LIBC = r"""
import ctypes, ctypes.util, sys

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]

libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
"""  # a child's glibc malloc/free and mallinfo2 (hblkhd: bytes in blocks with their own mapping)

CHILD = (
    LIBC
    + r"""
from qlooper.allocator import pin_mmap_threshold
pinned = pin_mmap_threshold() if sys.argv[1] == "pin" else False
size = 4 << 20
libc.free(libc.malloc(size))
block = libc.malloc(size)
print(int(pinned), libc.mallinfo2().hblkhd >= size)
libc.free(block)
"""
)


RECYCLING_CHILD = (
    LIBC
    + r"""
from qlooper.allocator import recycled_heap

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

size, big = 4 << 20, 24 << 20
with recycled_heap() as active:
    a = libc.malloc(size)
    inside_mapped = libc.mallinfo2().hblkhd >= size
    libc.free(a)
    b = libc.malloc(big)
    ctypes.memset(b, 1, big)
    libc.free(b)
    kept = rss()
    again = libc.malloc(big)
    reused = again == b
    libc.free(again)
released = kept - rss()
c = libc.malloc(size)
after_mapped = libc.mallinfo2().hblkhd >= size
libc.free(c)
print(int(active), inside_mapped, reused, after_mapped, released >= big // 2)
"""
)


def test_a_recycled_heap_reuses_large_blocks_then_restores_the_pin_and_returns_the_pages() -> None:
    """Inside: a 4 MiB block comes from the heap and a freed 24 MiB block is handed out again (the same
    address); after: the pin is back (a 4 MiB block gets its own mapping) and the freed pages left the
    resident set."""
    done = subprocess.run(
        [sys.executable, "-c", RECYCLING_CHILD],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")},
        timeout=600,
        check=True,
    )
    assert done.stdout.split() == ["1", "False", "True", "True", "True"]


def test_a_recycled_heap_leaves_a_user_trim_setting_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    from qlooper import allocator

    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")
    with allocator.recycled_heap() as active:
        assert active is False


def _glibc_with_mallinfo2() -> bool:
    name = ctypes.util.find_library("c")
    return name is not None and hasattr(ctypes.CDLL(name), "mallinfo2")


pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not _glibc_with_mallinfo2(), reason="glibc's mallinfo2 is Linux-only"
)


def _child(mode: str) -> tuple[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, mode], capture_output=True, text=True, env=env, timeout=600, check=True
    )
    pinned, mapped = done.stdout.split()
    return pinned, mapped


def test_pinned_threshold_gives_a_reused_large_block_its_own_mapping() -> None:
    assert _child("pin") == ("1", "True")


def test_without_the_pin_glibc_serves_it_from_the_heap() -> None:
    """The behaviour the pin removes (so the test above can fail): the dynamic threshold moved the block."""
    assert _child("none") == ("0", "False")


def test_an_environment_setting_is_left_to_the_user(monkeypatch: pytest.MonkeyPatch) -> None:
    from qlooper import allocator

    allocator.pin_mmap_threshold.cache_clear()
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    try:
        assert allocator.pin_mmap_threshold() is False
    finally:
        allocator.pin_mmap_threshold.cache_clear()
