"""Compiling ``dynamic`` rule patterns with limits that rule out catastrophic backtracking.

Python's ``re`` cannot be interrupted, so a pattern such as ``(a+)+$`` or ``(a|a)*b`` matched against a
module name would hang ``inspect``, ``eval`` or a load. A pattern is refused (``ConfigError`` naming the
rule) when it is longer than :data:`MAX_PATTERN_LENGTH` characters, uses a backreference, repeats a body
that itself holds an unbounded repeat or an alternation (``(x+)+``, ``(a|b)*``), or has more than
:data:`MAX_UNBOUNDED_REPEATS` unbounded repeats (``.*``, ``+``) in all (the worst case grows with the
name length to that power: about 10 ms for a 100-character name at the limit). Rules written by
GPT-QModel and by this package (``.*``, ``\\d+``, ``(?:q|k|v)_proj``) pass.
"""

from __future__ import annotations

import importlib
import re
import sys
from typing import Any

from ..errors import ConfigError


def _regex_module(name: str) -> Any:
    """The stdlib regex parser modules: ``re._parser`` (3.11+) or ``sre_parse`` (3.10), same for constants."""
    try:
        return importlib.import_module(f"re._{name}")
    except ImportError:  # pragma: no cover - Python 3.10
        return importlib.import_module(f"sre_{name}")


sre_parse = _regex_module("parse" if sys.version_info < (3, 11) else "parser")
sre_constants = _regex_module("constants")

MAX_PATTERN_LENGTH = 512
MAX_UNBOUNDED_REPEATS = 4
_REPEATS = {
    sre_constants.MAX_REPEAT,
    sre_constants.MIN_REPEAT,
    getattr(sre_constants, "POSSESSIVE_REPEAT", sre_constants.MAX_REPEAT),
}


def _children(av: object) -> list[Any]:
    """Every sub-pattern nested in an opcode argument (groups, branches, assertions ...)."""
    if isinstance(av, sre_parse.SubPattern):
        return [av]
    if isinstance(av, (list, tuple)):
        return [child for item in av for child in _children(item)]
    return []


def _scan(pattern: Any) -> tuple[int, bool, str | None]:
    """``(unbounded repeats, holds a repeat/branch, reason to refuse or None)`` of a parsed pattern."""
    unbounded, risky = 0, False
    for op, av in pattern:
        if op == sre_constants.GROUPREF or op == sre_constants.GROUPREF_EXISTS:
            return unbounded, True, "a backreference"
        if op in _REPEATS:
            _, high, body = av
            inner, inner_risky, reason = _scan(body)
            if reason:
                return unbounded, True, reason
            if high > 1 and inner_risky:
                return unbounded, True, "a repeated group that itself repeats or alternates (nested quantifier)"
            unbounded += inner + (1 if high == sre_constants.MAXREPEAT else 0)
            risky = risky or high == sre_constants.MAXREPEAT or inner_risky
            continue
        if op == sre_constants.BRANCH:
            risky = True
        for child in _children(av):
            inner, inner_risky, reason = _scan(child)
            if reason:
                return unbounded, True, reason
            unbounded += inner
            risky = risky or inner_risky
    return unbounded, risky, None


def compile_rule_pattern(key: str, pattern: str) -> re.Pattern[str]:
    """Compile ``pattern`` (the regex of dynamic rule ``key``) or raise :class:`ConfigError` saying why not."""
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise ConfigError(
            f"dynamic[{key[:60]!r}...]: pattern of {len(pattern)} characters; expected at most {MAX_PATTERN_LENGTH}"
        )
    try:
        regex = re.compile(pattern)
        parsed = sre_parse.parse(pattern)
    except (re.error, RecursionError) as exc:
        raise ConfigError(f"dynamic[{key!r}]: invalid regular expression ({exc})") from None
    unbounded, _, reason = _scan(parsed)
    if reason is None and unbounded > MAX_UNBOUNDED_REPEATS:
        reason = f"{unbounded} unbounded repeats (at most {MAX_UNBOUNDED_REPEATS})"
    if reason is not None:
        raise ConfigError(
            f"dynamic[{key!r}]: refused: {reason} can make matching a module name take exponential time; "
            "expected a simple pattern such as '.*\\.layers\\.(\\d+)\\.mlp\\..*'"
        )
    return regex
