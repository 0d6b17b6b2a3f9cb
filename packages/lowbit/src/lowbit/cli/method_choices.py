"""The ``lowbit quantize --method`` choices, read from qhf's method registry (:mod:`qhf.methods`: the built-in
methods and every third-party method registered through the ``lowbit.methods`` entry-point group).

The parser holds a :class:`MethodChoices` that asks the registry only when argparse checks a value or prints the
choices, so building the parser (``lowbit --help``, ``lowbit inspect ...``) imports no package.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload


def method_flags() -> tuple[str, ...]:
    """Every ``--method`` value (``nf4`` for bitsandbytes), in the registry's order."""
    from qhf.methods import cli_names

    return cli_names()


class MethodChoices(Sequence[str]):
    """A lazy sequence of :func:`method_flags` (argparse's ``choices``)."""

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return method_flags()[index]

    def __len__(self) -> int:
        return len(method_flags())

    def __contains__(self, value: object) -> bool:
        return value in method_flags()

    def __iter__(self) -> Iterator[str]:
        return iter(method_flags())
