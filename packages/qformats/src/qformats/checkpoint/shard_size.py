"""Parsing ``max_shard_size`` (an int of bytes or a string with a binary K/M/G/T/P suffix)."""

from __future__ import annotations

import re

from ..errors import ConfigError

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_shard_size(value: int | str) -> int:
    """Bytes for ``value``: ``4096``, ``"500MB"``, ``"4GB"``, ``"1GiB"`` (K/M/G/T/P are powers of 1024)."""
    if isinstance(value, bool):
        raise ConfigError(f"max_shard_size: expected bytes or a size string, found {value!r}")
    if isinstance(value, int):
        size = value
    else:
        match = _PATTERN.match(str(value))
        if match is None:
            raise ConfigError(f"max_shard_size: expected e.g. 4096, '500MB' or '4GB', found {value!r}")
        size = int(float(match.group(1)) * _UNITS[match.group(2).upper()])
    if size <= 0:
        raise ConfigError(f"max_shard_size: expected a positive size, found {value!r}")
    return size
