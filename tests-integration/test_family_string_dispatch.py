"""No new dispatch on weight-family strings outside the weight-family registry.

A weight family (``qformats.layouts.families``) owns its tensor names, checks, conversions, options and
summary; code elsewhere asks the family's record instead of comparing its key or config method with a string
literal (``== "fp8"``, ``in ("qqq", "paroquant")``, ``case "gguf"``) or keeping a table keyed by family strings
(``{"fp8": ..., "bnb4": ...}``). This test reads every module of every package's ``src/`` with ``ast`` (nothing
is imported) and counts such comparisons and tables per file. The family strings are read from the registry
(every key and config method, so a family registered later is covered too). The registry files themselves
(:data:`REGISTRIES`) are exempt.

:data:`KNOWN` is the count each file held when the registry took over (mostly method-level choices: the method
half of issue 37 removes them). A file above its count fails (a new comparison: add a hook to the family record
instead, see "Add a layout (weight family)" in docs/internals.md); a file below it fails too, so the count is
lowered with the change that removed one.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from qformats.layouts.families import registered_families

ROOT = Path(__file__).resolve().parents[1]
PACKAGES_DIR = ROOT / "packages"

#: Where family strings belong: the registry and the built-in records.
REGISTRIES = frozenset(
    {
        "packages/qformats/src/qformats/layouts/families.py",
        "packages/qformats/src/qformats/layouts/builtin_families.py",
    }
)

#: file -> comparisons / tables on family strings it holds today (see the module docstring).
KNOWN: dict[str, int] = {
    # method-level choices and method tables (the method registry half of issue 37)
    "packages/lowbit/src/lowbit/cli/quantize_cmd.py": 1,
    "packages/lowbit/src/lowbit/cli/quantize_flags.py": 2,
    "packages/qformats/src/qformats/config/quantizer_formats.py": 2,
    "packages/qhf/src/qhf/calibrated_settings.py": 2,
    "packages/qhf/src/qhf/checkpoint_config.py": 4,
    "packages/qhf/src/qhf/config_view.py": 1,
    "packages/qhf/src/qhf/quant_config.py": 1,
    "packages/qhf/src/qhf/weight_only.py": 3,
    "packages/qhf/src/qhf/weight_only_settings.py": 5,
    # the public GGUF format name ("gguf" as a format or source kind, not a family dispatch)
    "packages/qformats/src/qformats/config/aliases.py": 1,
    "packages/qformats/src/qformats/config/resolve.py": 2,
    "packages/qformats/src/qformats/gguf_file/directory_export.py": 2,
    "packages/qformats/src/qformats/layouts/gguf/aliases.py": 1,
    "packages/qhf/src/qhf/gguf_settings.py": 1,
    "packages/qhf/src/qhf/save/dense_dtype.py": 1,
    # kernels: "integer" kernel contracts and a VPTQ bfloat16 codebook cast
    "packages/qkernels/src/qkernels/backends/torch_reference.py": 1,
    "packages/qkernels/src/qkernels/contract.py": 1,
    "packages/qkernels/src/qkernels/weight_only.py": 1,
    "packages/qlooper/src/qlooper/kernels.py": 1,
}


def family_strings() -> frozenset[str]:
    """Every registered family key and config method (``fp8``, ``bnb4``, ``bitsandbytes``, ``qqq`` ...)."""
    found = {f.key for f in registered_families()} | {f.method for f in registered_families() if f.method}
    return frozenset(found)


def _literals(node: ast.AST) -> list[str]:
    """The string constants of ``node`` itself or of a tuple / list / set literal it is."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def dispatch_sites(source: Path, names: frozenset[str]) -> list[int]:
    """Line numbers of the comparisons, ``case`` patterns and dict tables on family strings in ``source``."""
    tree = ast.parse(source.read_text(encoding="utf-8"), filename=str(source))
    lines: list[int] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and all(
            isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops
        ):
            if any(v in names for side in (node.left, *node.comparators) for v in _literals(side)):
                lines.append(node.lineno)
        elif isinstance(node, ast.MatchValue) and any(v in names for v in _literals(node.value)):
            lines.append(node.lineno)
        elif isinstance(node, ast.Dict):
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
            if sum(k in names for k in keys) >= 2:  # a table keyed by family strings
                lines.append(node.lineno)
    return sorted(lines)


def scan() -> dict[str, list[int]]:
    """Repository-relative path -> dispatch lines, for every package source file outside :data:`REGISTRIES`."""
    names = family_strings()
    found: dict[str, list[int]] = {}
    for source in sorted(PACKAGES_DIR.glob("*/src/**/*.py")):
        path = source.relative_to(ROOT).as_posix()
        if path in REGISTRIES:
            continue
        lines = dispatch_sites(source, names)
        if lines:
            found[path] = lines
    return found


def test_the_scan_sees_a_comparison_a_table_and_a_case(tmp_path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        'def f(method, fmt):\n    if method == "fp8":\n        pass\n    if fmt in ("nf4", "qqq"):\n        pass\n'
        '    table = {"gguf": 1, "vptq": 2}\n    match method:\n        case "exl3":\n            pass\n'
        '    return method == "gptq" or {"fp8": 1}\n',
        encoding="utf-8",
    )
    assert dispatch_sites(sample, family_strings()) == [2, 4, 6, 8]


def test_no_new_family_string_dispatch_outside_the_registry() -> None:
    found = scan()
    counts = Counter({path: len(lines) for path, lines in found.items()})
    grown = {p: (KNOWN.get(p, 0), n, found[p]) for p, n in counts.items() if n > KNOWN.get(p, 0)}
    assert not grown, (
        "new comparisons with weight-family strings outside the registry (file: known, found, lines); ask the "
        f"family's record instead (docs/internals.md, 'Add a layout (weight family)'): {grown}"
    )
    shrunk = {p: (n, counts.get(p, 0)) for p, n in KNOWN.items() if counts.get(p, 0) < n}
    assert not shrunk, f"fewer family-string comparisons than KNOWN lists (file: known, found); lower KNOWN: {shrunk}"
