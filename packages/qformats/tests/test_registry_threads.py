"""The lazy built-in registry is complete for every thread that looks it up, even the first lookups."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import threading
from qformats.layouts.registry import get_layout, registered_layouts
errors = []
barrier = threading.Barrier(8)
def look():
    barrier.wait()
    try:
        get_layout("gemm"); get_layout("gptq_v2")
    except Exception as exc:  # report every failure to the parent
        errors.append(repr(exc))
threads = [threading.Thread(target=look) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print(len(errors), len(registered_layouts()))
"""


def test_concurrent_first_lookups_see_every_layout() -> None:
    for _ in range(3):  # a fresh interpreter each time: the first lookup is the racy one
        out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True, timeout=600)
        failures, count = map(int, out.stdout.split())
        assert failures == 0 and count >= 11
