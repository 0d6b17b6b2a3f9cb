"""Whether torch backs its large CPU tensors with transparent huge pages (2 MiB pages instead of 4 KiB).

Every large tensor a layer's forwards and solves allocate is a fresh mapping (:mod:`qlooper.allocator` pins
glibc's mmap threshold so that freed memory goes back to the system), and each 4 KiB page of it costs a page
fault on first touch. On the virtual machines this project is developed on a fault costs about 10 µs, so a
GB of fresh tensors costs about 2.5 s of system time: an 8B-shaped layer (hidden 4096, 32 x 512 tokens)
spent a third of its CPU time there. torch's own CPU allocator can instead page-align tensors of 2 MiB and
more and ``madvise(MADV_HUGEPAGE)`` them, so that one fault maps a 2 MiB page (512 small ones) where the
kernel's transparent huge pages are ``always`` or ``madvise``. It does so when the
environment variable :data:`HUGE_PAGE_ENV` is ``1`` at the first CPU allocation of the process (read once,
then cached: setting it later has no effect). It changes no value, only how memory is mapped.

The ``lowbit`` command sets it before torch is imported. A program using the packages sets it itself (in the
environment, or in ``os.environ`` before its first tensor). :func:`huge_pages_requested` tells whether this
process's allocator took it; the loop logs once when it did not.
"""

from __future__ import annotations

import functools
import os
import sys

import torch

#: torch's environment switch for huge-page-aligned CPU allocations (c10's ``alloc_cpu``)
HUGE_PAGE_ENV = "THP_MEM_ALLOC_ENABLE"


#: the probe's size: above glibc's largest dynamic mmap threshold (32 MiB), so it always gets its own mapping
PROBE_BYTES = 64 * 1024 * 1024


@functools.lru_cache(maxsize=1)
def huge_pages_requested() -> bool:
    """True when torch's CPU allocator of this process asks for huge pages (the switch was on at its first
    allocation; False off Linux). Probed once, from where one 64 MiB tensor starts (it is never touched, so it
    costs no memory): with the switch on torch aligns it to the page and advises huge pages; otherwise it asks for
    64-byte alignment, which glibc serves 64 bytes past the start of its own mapping."""
    if not sys.platform.startswith("linux"):
        return False
    probe = torch.empty(PROBE_BYTES, dtype=torch.uint8)
    return probe.data_ptr() % os.sysconf("SC_PAGE_SIZE") == 0
