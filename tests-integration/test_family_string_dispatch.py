"""No new dispatch on weight-family or method strings outside their registries.

A weight family (``qformats.layouts.families``) owns its tensor names, checks, conversions, options and
summary; code elsewhere asks the family's record instead of comparing its key or config method with a string
literal (``== "fp8"``, ``in ("qqq", "paroquant")``, ``case "gguf"``) or keeping a table keyed by family strings
(``{"fp8": ..., "bnb4": ...}``). This test reads every module of every package's ``src/`` with ``ast`` (nothing
is imported) and counts such comparisons and tables per file. The family strings are read from the registry
(every key and config method, so a family registered later is covered too). The registry files themselves
(:data:`REGISTRIES`) are exempt.

:data:`KNOWN` is the count each file holds (none since issue 37 finished: every site asks a record). A file
above its count fails (a new comparison: add a hook to the family record
instead, see "Add a layout (weight family)" in docs/internals.md); a file below it fails too, so the count is
lowered with the change that removed one.

Methods (the second scan): a quantization method (``qhf.methods``, :class:`~qhf.methods.QuantMethod`) owns its
formats, settings, CLI flags and defaults; code elsewhere asks the method object (an attribute or hook) instead of
comparing a method name. The method strings are every registered method's name and ``--method`` value, read from
qhf's registry (``gptq``, ``awq``, ``rtn``, ``fp8``, ``bitsandbytes``, ``nf4``, ``gguf``, ``qqq``, ``paroquant`` and
any method registered later). Many of them are also public *format* names (``gptq`` is a layout, ``gguf`` a file
kind, ``qqq`` a layout key), and a format comparison (``fmt == "gptq"``, ``to in ("gptq", "gptq_v2")``,
``entry.layout == "gptq"``) is a layout's business, not a method dispatch; so what counts is decided by what the
string is compared with:

* a comparison (``==``, ``!=``, ``in``, ``not in``) of a method string with an expression that names a method:
  a name, attribute or call named ``method``, ``algorithm``, ``*_method`` or ``method_*`` (``args.method``,
  ``cfg.method``, ``algorithm(cfg)``, ``method_of(cfg)``, ``str(cfg.method)``); a ``case`` of a ``match`` on such
  an expression;
* a table keyed by two or more method strings (``{"gptq": ..., "awq": ...}``), a constant list of method names
  (an upper-case name holding ``METHOD`` bound to a tuple / list / set of method strings) and a read of an
  upper-case table with a method-string key (``QUANTIZER_FORMATS["awq"]``).

A string that is only a format (``marlin``, ``gptq_v2``) is never counted; ``gptq`` compared with ``fmt`` is not
either. The method registry (:data:`METHOD_REGISTRIES`, ``qhf/methods/``) is exempt. :data:`KNOWN_METHOD` is the
per-file count, with the same rule as :data:`KNOWN` (a file above it fails, below it fails until lowered).
A site that compares a string that is both a family's and a method's (``method == "fp8"``) is counted by both scans.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

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

#: file -> comparisons / tables on family strings it holds today (see the module docstring). Empty since issue 37:
#: a family question is an attribute of its record (``layout_based``, ``gguf_blocks``, ``stored_bits``,
#: ``bfloat16_compute_tensor`` ...) and a public format name is compared through ``qformats.enums.FORMAT``.
KNOWN: dict[str, int] = {}


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


def scan(
    sites: Callable[[Path, frozenset[str]], list[int]] = dispatch_sites,
    names: frozenset[str] | None = None,
    exempt: Callable[[str], bool] = REGISTRIES.__contains__,
) -> dict[str, list[int]]:
    """Repository-relative path -> ``sites`` lines of ``names`` (default: the family strings), for every package
    source file not ``exempt`` (default: :data:`REGISTRIES`)."""
    names = family_strings() if names is None else names
    found: dict[str, list[int]] = {}
    for source in sorted(PACKAGES_DIR.glob("*/src/**/*.py")):
        path = source.relative_to(ROOT).as_posix()
        if exempt(path):
            continue
        lines = sites(source, names)
        if lines:
            found[path] = lines
    return found


def known_problems(found: dict[str, list[int]], known: dict[str, int]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(grown, shrunk)``: files above their ``known`` count (known, found, lines) and below it (known, found)."""
    counts = Counter({path: len(lines) for path, lines in found.items()})
    grown = {p: (known.get(p, 0), n, found[p]) for p, n in counts.items() if n > known.get(p, 0)}
    shrunk = {p: (n, counts.get(p, 0)) for p, n in known.items() if counts.get(p, 0) < n}
    return grown, shrunk


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
    grown, shrunk = known_problems(scan(), KNOWN)
    assert not grown, (
        "new comparisons with weight-family strings outside the registry (file: known, found, lines); ask the "
        f"family's record instead (docs/internals.md, 'Add a layout (weight family)'): {grown}"
    )
    assert not shrunk, f"fewer family-string comparisons than KNOWN lists (file: known, found); lower KNOWN: {shrunk}"


# --- method strings (the second scan; module docstring) ---------------------------------------------------------

#: Where method strings belong: qhf's method registry and its built-in methods.
METHOD_REGISTRIES_DIR = "packages/qhf/src/qhf/methods/"

#: file -> comparisons / tables on method strings it holds today (see the module docstring). Empty since issue 37:
#: qformats (below qhf, which cannot ask qhf's registry) asks its own per-method records,
#: ``qformats.config.quantizer_formats.QuantizerFormats`` (``marlin_layout``, ``stores_g_idx`` ...), and its weight
#: families (``families_of_method``); a stored method chosen from a target layout is decided on the layout.
KNOWN_METHOD: dict[str, int] = {}


def method_strings() -> frozenset[str]:
    """Every registered method's name and ``--method`` value (qhf's registry; third-party ones included)."""
    from qhf.methods import cli_names, method_names

    return frozenset(method_names()) | frozenset(cli_names())


def _tail_name(node: ast.AST) -> str | None:
    """The name an expression ends in: ``x`` / ``a.x`` / ``x(...)`` / ``a.x(...)``; ``str(e)`` is ``e``'s."""
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name) and node.func.id == "str" and len(node.args) == 1:
            return _tail_name(node.args[0])
        return _tail_name(node.func)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _names_a_method(node: ast.AST) -> bool:
    name = (_tail_name(node) or "").lower()
    return name in ("method", "algorithm") or name.endswith("_method") or name.startswith("method_")


def _table_name(node: ast.AST) -> str | None:
    name = _tail_name(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
    return name if name and name.isupper() else None


def method_sites(source: Path, names: frozenset[str]) -> list[int]:
    """Line numbers of the comparisons, ``case`` patterns, tables and table reads on method strings in ``source``
    (what counts: the module docstring)."""
    tree = ast.parse(source.read_text(encoding="utf-8"), filename=str(source))
    lines: list[int] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and all(
            isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops
        ):
            sides = (node.left, *node.comparators)
            if any(_names_a_method(s) for s in sides) and any(v in names for s in sides for v in _literals(s)):
                lines.append(node.lineno)
        elif isinstance(node, ast.Match) and _names_a_method(node.subject):
            for case in node.cases:
                for pattern in ast.walk(case.pattern):
                    if isinstance(pattern, ast.MatchValue) and any(v in names for v in _literals(pattern.value)):
                        lines.append(pattern.lineno)
        elif isinstance(node, ast.Dict):
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
            if sum(k in names for k in keys) >= 2:
                lines.append(node.lineno)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            if isinstance(value, ast.Call) and value.args and _tail_name(value.func) in ("frozenset", "set", "tuple"):
                value = value.args[0]
            listed = [v for v in _literals(value) if v in names] if value is not None else []
            if listed and not isinstance(value, ast.Constant):
                if any("METHOD" in (_table_name(t) or "") for t in targets):
                    lines.append(node.lineno)
        elif isinstance(node, ast.Subscript) and _table_name(node.value):
            if any(v in names for v in _literals(node.slice)) and isinstance(node.slice, ast.Constant):
                lines.append(node.lineno)
    return sorted(lines)


def method_scan() -> dict[str, list[int]]:
    """Repository-relative path -> method-string lines, for every package source file outside the registry."""
    return scan(method_sites, method_strings(), lambda path: path.startswith(METHOD_REGISTRIES_DIR))


def test_the_method_scan_counts_method_dispatch_not_format_names(tmp_path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def f(args, cfg, fmt, entry):\n"
        '    if args.method != "gptq":\n'  # 2: a method
        "        pass\n"
        '    if fmt in ("gptq", "gptq_v2") or entry.layout == "awq":\n'  # 4: formats, not counted
        "        pass\n"
        '    if str(cfg.method) in ("awq", "rtn") or algorithm(cfg) == "gguf":\n'  # 6: one comparison... two
        "        pass\n"
        '    table = {"gptq": 1, "awq": 2}\n'  # 8: a method table
        "    match method_of(cfg):\n"
        '        case "qqq" | "marlin":\n'  # 10: the qqq case
        "            pass\n"
        '    return QUANTIZER_FORMATS["awq"], {"marlin": 1}\n'  # 12: a table read
        'BUDGET_METHODS = ("gptq", "rtn")\n',  # 13: a method list
        encoding="utf-8",
    )
    assert method_sites(sample, method_strings()) == [2, 6, 6, 8, 10, 12, 13]


def test_no_new_method_string_dispatch_outside_the_registry() -> None:
    grown, shrunk = known_problems(method_scan(), KNOWN_METHOD)
    assert not grown, (
        "new comparisons with method strings outside qhf's method registry (file: known, found, lines); ask the "
        f"QuantMethod instead (docs/internals.md, 'Add a method'): {grown}"
    )
    assert not shrunk, (
        f"fewer method-string comparisons than KNOWN_METHOD lists (file: known, found); lower it: {shrunk}"
    )
