"""``lowbit quantize --method`` takes its choices from qhf's method registry, asked only when needed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import lowbit_env, run_lowbit


def test_method_choices_are_the_registry() -> None:
    from lowbit.cli.parser import build_parser
    from qhf.methods import cli_names

    quantize = build_parser()._subparsers._group_actions[0].choices["quantize"]  # type: ignore[union-attr]
    method = next(a for a in quantize._actions if a.dest == "method")
    assert tuple(method.choices) == cli_names() and "nf4" in method.choices and "int3" not in method.choices
    bad = run_lowbit("quantize", "m", "--out", "o", "--method", "int3")
    assert bad.returncode == 2 and "invalid choice: 'int3' (choose from 'gptq', 'awq', 'rtn'" in bad.stderr


def test_building_the_parser_imports_no_package() -> None:
    code = (
        "import sys; from lowbit.cli.parser import build_parser; build_parser(); "
        "print(sorted(m for m in ('qformats', 'qhf', 'torch') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=lowbit_env())
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


def test_setting_is_only_for_third_party_methods(tiny_llama: Path, tmp_path: Path) -> None:
    ran = run_lowbit("quantize", str(tiny_llama), "--out", str(tmp_path / "o"), "--method", "gptq", "--setting", "x=1")
    assert ran.returncode == 2 and "--setting: the settings of a third-party method; --method gptq" in ran.stderr
    ran = run_lowbit("quantize", "m", "--out", "o", "--setting", "novalue")
    assert ran.returncode == 2 and "expected KEY=VALUE, found 'novalue'" in ran.stderr
