"""torch's huge-page switch as the loop sees it (``qlooper.huge_pages.huge_pages_requested``).

torch reads ``THP_MEM_ALLOC_ENABLE`` once per process, at its first CPU allocation, so each case runs in a
fresh interpreter: with the switch on in its environment, off, and turned on only after a first tensor.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CHILD = r"""
import os, sys
import torch
if sys.argv[1] == "late":
    torch.ones(8)  # torch reads the switch here, before it is set
    os.environ["THP_MEM_ALLOC_ENABLE"] = "1"
from qlooper.huge_pages import huge_pages_requested
big = torch.empty(3 << 20, dtype=torch.uint8)
print(int(huge_pages_requested()), big.data_ptr() % 4096 == 0)
"""


def _child(mode: str, switch: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    if switch is not None:
        env["THP_MEM_ALLOC_ENABLE"] = switch
    done = subprocess.run([sys.executable, "-c", CHILD, mode], env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise AssertionError(done.stderr)
    return done.stdout.split("\n")[-2]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="torch's huge-page switch exists on Linux only")
@pytest.mark.parametrize(
    ("mode", "switch", "expected"),
    [("env", "1", "1 True"), ("env", None, "0 False"), ("env", "0", "0 False"), ("late", None, "0 False")],
)
def test_probe_tells_whether_torch_took_the_switch(mode: str, switch: str | None, expected: str) -> None:
    assert _child(mode, switch) == expected


def test_loop_logs_whether_huge_pages_are_off(caplog: pytest.LogCaptureFixture) -> None:
    """The loop names the switch in its log exactly when this process's torch runs without it."""
    from qalgos.spec import QuantSpec
    from qlooper import quantize_model
    from qlooper.huge_pages import HUGE_PAGE_ENV, huge_pages_requested
    from toy_models import DENSE, ToyDecoder, toy_calibration

    with caplog.at_level("INFO", logger="qlooper.loop"):
        quantize_model(ToyDecoder(), DENSE, toy_calibration(), QuantSpec(bits=4, group_size=32), "rtn")
    logged = any(HUGE_PAGE_ENV in record.getMessage() for record in caplog.records)
    assert logged is not huge_pages_requested()
