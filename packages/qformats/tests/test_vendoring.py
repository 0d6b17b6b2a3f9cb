"""qformats works when copied under another package name (how engines vendor it)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import qformats

CODE = """
import sys
from engine._vendor.qformats.layouts.registry import get_layout, registered_layouts
assert "qformats" not in sys.modules, "the vendored copy imported the installed qformats"
print(len(registered_layouts()), get_layout("gptq_v2").key)
"""


def test_a_vendored_copy_registers_its_layouts_without_the_installed_package(tmp_path: Path) -> None:
    target = tmp_path / "engine" / "_vendor"
    target.mkdir(parents=True)
    (tmp_path / "engine" / "__init__.py").write_text("")
    (target / "__init__.py").write_text("")
    shutil.copytree(Path(qformats.__file__).parent, target / "qformats", ignore=shutil.ignore_patterns("__pycache__"))
    out = subprocess.run(
        [sys.executable, "-c", CODE],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": ""},
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    count, key = out.stdout.split()
    assert int(count) >= 11 and key == "gptq_v2"
