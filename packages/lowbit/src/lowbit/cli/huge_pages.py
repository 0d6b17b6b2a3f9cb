"""Huge pages for torch's large CPU tensors in every ``lowbit`` run (see ``qlooper.huge_pages``).

torch reads its switch, the environment variable ``THP_MEM_ALLOC_ENABLE``, once, at the process's first CPU
allocation, so the command sets it before any package (and torch) is imported. A value the user set, ``0``
included, is left alone. It changes no number the command computes, only how many page faults its tensors
cost (measured in docs/big-models.md).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

#: torch's switch (c10 ``alloc_cpu``); the same name as ``qlooper.huge_pages.HUGE_PAGE_ENV``, which a test holds
HUGE_PAGE_ENV = "THP_MEM_ALLOC_ENABLE"


def request_huge_pages(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Turn the switch on in ``environ`` unless it is set already; True when it is on afterwards."""
    environ.setdefault(HUGE_PAGE_ENV, "1")
    return environ[HUGE_PAGE_ENV] == "1"
