"""SIGKILL at every named point of a commit: the next load returns the last complete generation, byte-identical.

Two generations are committed first (once, then copied per case); a writer subprocess then resumes and is killed
at one injection point during the commit of generation 3. Points before CURRENT is replaced must leave
generation 2 current; points after it leave generation 3. A clean writer then resumes from there.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import assert_generation, run_child
from qcheckpoint.faults import POINTS, PUBLISHED_POINTS

# Each commit writes three objects: the new artifact (#1), the continuation (#2) and the manifest (#3).
CASES = [f"{point}#1" for point in POINTS] + [
    f"{point}#{hit}" for point in POINTS if point.startswith("object.") for hit in (2, 3)
]


@pytest.fixture(scope="module")
def two_generations(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("base") / "ckpt"
    code, committed = run_child(base, 1, 2)
    assert code == 0 and committed == [1, 2]
    return base


@pytest.mark.parametrize("fault", CASES)
def test_kill_at_point_keeps_last_complete_generation(fault: str, two_generations: Path, tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    shutil.copytree(two_generations, root)
    code, committed = run_child(root, 3, 3, fault=fault, collect=True)
    assert code == -9, f"the injected fault {fault} was never reached"
    point = fault.split("#")[0]
    published = point in PUBLISHED_POINTS
    assert committed == ([3] if point.startswith("collect.") else [])
    assert_generation(root, 3 if published else 2)
    # A clean writer resumes from whatever survived and keeps going.
    first = 4 if published else 3
    code, committed = run_child(root, first, 4, collect=True)
    assert code == 0 and committed == list(range(first, 5))
    assert_generation(root, 4)
    # The resumed writer's collection removed whatever temporaries the crash left behind.
    leftovers = [p.name for p in [*root.iterdir(), *(root / "objects").iterdir()] if p.name.endswith(".tmp")]
    assert leftovers == []
