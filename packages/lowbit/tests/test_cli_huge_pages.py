"""The lowbit command turns torch's huge-page switch on before torch's first tensor (lowbit.cli.huge_pages)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from lowbit.cli.huge_pages import HUGE_PAGE_ENV, request_huge_pages


def test_switch_set_unless_the_user_chose() -> None:
    environ: dict[str, str] = {}
    assert request_huge_pages(environ) and environ == {HUGE_PAGE_ENV: "1"}
    chosen = {HUGE_PAGE_ENV: "0"}
    assert not request_huge_pages(chosen) and chosen == {HUGE_PAGE_ENV: "0"}


def test_name_is_the_one_qlooper_probes() -> None:
    from qlooper.huge_pages import HUGE_PAGE_ENV as PROBED

    assert HUGE_PAGE_ENV == PROBED


# A fresh interpreter runs the command's entry point (an `inspect` that fails on an empty folder, after the
# switch is set), then asks qlooper whether torch's allocator took the switch.
CHILD = r"""
import sys
from lowbit.cli.main import main
main(["inspect", sys.argv[1]])
from qlooper.huge_pages import huge_pages_requested
print("requested", int(huge_pages_requested()))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="torch's huge-page switch exists on Linux only")
@pytest.mark.parametrize(("preset", "expected"), [(None, "requested 1"), ("0", "requested 0")])
def test_the_command_runs_with_huge_pages(tmp_path: object, preset: str | None, expected: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != HUGE_PAGE_ENV}
    if preset is not None:
        env[HUGE_PAGE_ENV] = preset
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == expected
