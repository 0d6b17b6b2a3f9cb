"""Imports point one way: a package may import only the siblings the map allows and it declares.

Reads every module of every package with ``ast`` (nothing is imported), so it also catches imports
inside functions. The map is the table "The package map" in docs/internals.md, read from that page; each
package's pyproject must declare what it imports.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGES_DIR = ROOT / "packages"

MAP_PAGE = ROOT / "docs" / "internals.md"
MAP_HEADING = "## The package map"


def read_map(page: Path) -> dict[str, set[str]]:
    """``package -> siblings it may import`` from the page's map table (``| `pkg` | `a`, `b` |`` rows)."""
    text = page.read_text(encoding="utf-8")
    start = text.find(MAP_HEADING)
    if start < 0:
        raise ValueError(f"{page}: no {MAP_HEADING!r} section")
    section = text[start:].split("\n## ", 1)[0]
    allowed: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`"):
            allowed[cells[0].strip("`")] = {n.strip().strip("`") for n in cells[1].split(",") if n.strip()}
    if not allowed:
        raise ValueError(f"{page}: the {MAP_HEADING!r} section holds no package rows")
    return allowed


# Who may import whom. Anything not listed is forbidden.
ALLOWED: dict[str, set[str]] = read_map(MAP_PAGE)
OURS = set(ALLOWED)


def imported_siblings(source: Path, own: str) -> set[tuple[str, int]]:
    """(sibling package, line) for every absolute import of one of our packages other than ``own``."""
    tree = ast.parse(source.read_text(encoding="utf-8"), filename=str(source))
    found: set[tuple[str, int]] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            top = name.split(".")[0]
            if top in OURS and top != own:
                found.add((top, node.lineno))
    return found


def declared_siblings(package: str) -> set[str]:
    """Sibling packages named in the package's required dependencies (not extras)."""
    data = tomllib.loads((PACKAGES_DIR / package / "pyproject.toml").read_text(encoding="utf-8"))
    deps = data["project"].get("dependencies", [])
    names = {re.split(r"[ <>=!~;\[]", dep, maxsplit=1)[0].strip().lower() for dep in deps}
    return names & OURS


def violations(package: str, src_root: Path) -> list[str]:
    problems: list[str] = []
    declared = declared_siblings(package)
    for path in sorted(src_root.rglob("*.py")):
        for sibling, line in sorted(imported_siblings(path, package)):
            shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            where = f"{shown}:{line}"
            if sibling not in ALLOWED[package]:
                problems.append(f"{where}: {package} imports {sibling}, which the map forbids")
            elif sibling not in declared:
                problems.append(f"{where}: {package} imports {sibling} but does not declare it")
    return problems


def test_the_map_names_every_package_and_points_one_way() -> None:
    """Every package directory has a row, and no package may import one that may import it back."""
    assert set(ALLOWED) == {p.name for p in PACKAGES_DIR.iterdir() if (p / "pyproject.toml").is_file()}
    cycles = [(a, b) for a, deps in ALLOWED.items() for b in deps if a in ALLOWED.get(b, set())]
    assert cycles == []


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_follow_the_map(package: str) -> None:
    assert violations(package, PACKAGES_DIR / package / "src" / package) == []


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_declared_siblings_are_allowed(package: str) -> None:
    assert declared_siblings(package) <= ALLOWED[package]


def test_checker_catches_a_forbidden_import(tmp_path: Path) -> None:
    """The checker is real: an upward import planted in a copy of qformats is reported."""
    fake = tmp_path / "qformats"
    fake.mkdir()
    (fake / "bad.py").write_text("def f():\n    from qkernels import registry\n", encoding="utf-8")
    assert violations("qformats", fake) == [f"{fake / 'bad.py'}:2: qformats imports qkernels, which the map forbids"]


def test_checker_catches_an_undeclared_import(tmp_path: Path) -> None:
    """An allowed, declared import passes."""
    fake = tmp_path / "qalgos"
    fake.mkdir()
    (fake / "ok.py").write_text("import qformats.logical\n", encoding="utf-8")
    assert violations("qalgos", fake) == []
