"""Compiling ``dynamic`` rule patterns in a restricted language whose matching time is bounded.

Python's ``re`` backtracks and cannot be interrupted, so a pattern such as ``(a+)+$`` or
``(?:.{1,40}){1,40}X$`` matched against a module name would hang ``inspect``, ``eval`` or a load. Rule
patterns are therefore held to a language without nested choices, and the bound is proven from it:

* A *choice point* is a repeat whose width varies (``*``, ``+``, ``?``, ``{m,n}`` with ``m != n``) or an
  alternation. A repeat that may run more than once must have a body without choice points (``(x+)+``,
  ``(a|b)*``, ``(?:.{1,40}){1,40}`` are refused; ``(?:ab){2,5}`` and ``\\d+`` are fine). Backreferences are
  refused.
* At most :data:`MAX_UNBOUNDED_REPEATS` variable-width repeats in all (lookarounds included), the
  product of the alternations' arities at most :data:`MAX_ALTERNATIVES`, the pattern at most
  :data:`MAX_PATTERN_LENGTH` characters, and the module name at most :data:`MAX_NAME_LENGTH` (checked by
  :func:`checked_name` before every match).

Bound: rules are matched at the start of the name (``re.match``). With no choice nested in a repeat, a
backtracking run is one path through the pattern per combination of choices; a variable repeat chooses
how many of the at most ``n + 1`` remaining positions it takes, and the repeats' ends are ordered in the
name, so there are at most ``C(n + V, V)`` combinations of repeat lengths times ``A`` of alternatives, each
walked in at most ``m`` steps: ``m * A * C(n + V, V)`` for pattern length ``m``. At the limits (m = 512,
A = 16, V = 3, n = 256) that is below 2.4e10 opcode steps in theory, and an adversarial pattern at the
limits (``.*a.*a.*aX`` on 256 ``a``) takes about 30 ms. Rules written by GPT-QModel and by this package
(``.*``, ``\\d+``, ``(?:q|k|v)_proj``) pass.
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
MAX_UNBOUNDED_REPEATS = 3
MAX_ALTERNATIVES = 16
MAX_NAME_LENGTH = 256
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


class _Tally:
    """Choice points met so far: variable-width repeats and the product of alternation arities."""

    def __init__(self) -> None:
        self.repeats = 0
        self.alternatives = 1


def _scan(pattern: Any, tally: _Tally) -> tuple[bool, str | None]:
    """``(holds a choice point, reason to refuse or None)`` of a parsed pattern, counting into ``tally``."""
    choice = False
    for op, av in pattern:
        if op in (sre_constants.GROUPREF, sre_constants.GROUPREF_EXISTS):
            return True, "a backreference"
        if op in _REPEATS:
            low, high, body = av
            inner, reason = _scan(body, tally)
            if reason:
                return True, reason
            if high > 1 and inner:
                return True, "a repeated group that itself holds a repeat or an alternation (nested quantifier)"
            if low != high:
                tally.repeats += 1
            choice = choice or inner or low != high
            continue
        if op == sre_constants.BRANCH:
            tally.alternatives *= len(av[1])
            choice = True
        for child in _children(av):
            inner, reason = _scan(child, tally)
            if reason:
                return True, reason
            choice = choice or inner
    return choice, None


def checked_name(name: str) -> str:
    """``name`` when it is short enough to match a rule against within the proven bound; else ConfigError."""
    if len(name) > MAX_NAME_LENGTH:
        raise ConfigError(
            f"module name {name[:60]!r}... of {len(name)} characters; expected at most {MAX_NAME_LENGTH} "
            "to match dynamic rules against"
        )
    return name


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
    tally = _Tally()
    _, reason = _scan(parsed, tally)
    if reason is None and tally.repeats > MAX_UNBOUNDED_REPEATS:
        reason = f"{tally.repeats} unbounded repeats (variable-width repeats; at most {MAX_UNBOUNDED_REPEATS})"
    if reason is None and tally.alternatives > MAX_ALTERNATIVES:
        reason = f"alternations with {tally.alternatives} combined choices (at most {MAX_ALTERNATIVES})"
    if reason is not None:
        raise ConfigError(
            f"dynamic[{key!r}]: refused: {reason} can make matching a module name take unbounded time; "
            "expected a simple pattern such as '.*\\.layers\\.(\\d+)\\.mlp\\..*'"
        )
    return regex
